#pragma once
// Fail-slow GPUs (FALCON, arXiv 2410.12588): a GPU keeps running, slower, for
// a while. Each slow GPU is priced under three treatments, side by side on
// the same history (docs/sim.md, "Fail-slow"):
//   ignore    its TP group, and with it the synchronous job, runs at the
//             slow GPU's pace (the units stay in equal counts);
//   drop      the slow GPU's replica sits out, as dp-drop, until it recovers;
//   ntp-slow  the group is laid out by speed (layout::JobConfig::speeds): the
//             busiest slot's work / speed sets its pace, and its replica
//             takes the batch share that pace allows, as an ntp replica does.
// Built once per scenario (a table over the slowdown factors the scenario
// can draw); pricing a state is O(slow GPUs). Pure.
#include <array>
#include <map>
#include <vector>

#include "sim/random.h"
#include "sim/scenario.h"
#include "sim/step_model.h"

namespace ntp::sim {

enum class SlowTreatment { kIgnore, kDrop, kNtpSlow };
inline constexpr int kSlowTreatmentCount = 3;
const char* slow_treatment_name(SlowTreatment t);

using SlowValues = std::array<double, kSlowTreatmentCount>;  // indexed by SlowTreatment

// A slow GPU of the job: the replica it belongs to and its step-time factor.
struct SlowGpu {
  int replica = 0;
  double factor = 1.0;
};

// Draws a slowdown factor (> 1) from the scenario's distribution.
double sample_slowdown(Rng& rng, const SlowdownSpec& spec);

class FailSlowPricing {
 public:
  // Factors are priced on a grid from slowdown.min in steps of 0.01 (at most
  // 256 steps: coarser for a wide range); a factor is priced at the nearest.
  FailSlowPricing(const Scenario& s, const StepModel& model);

  // Pace of a stage (relative to a healthy one) with one GPU slowed by
  // `factor`, laid out in equal counts (ignore) or by speed (ntp-slow).
  double stage_pace(SlowTreatment t, double factor) const;
  // Throughput of the job relative to failure-free while `slow` GPUs run slow.
  double value(SlowTreatment t, const std::vector<SlowGpu>& slow) const;

 private:
  const std::array<double, 2>& paces(double factor) const;
  long grid_index(double factor) const;

  StepModel model_;
  int dp_;
  double min_ = 1.0;   // the grid's first factor
  double step_ = 0.01;  // and its step
  std::map<long, std::array<double, 2>> paces_;  // factor / kGrid -> {ignore, ntp-slow} stage pace
};

}  // namespace ntp::sim
