#pragma once
// Timeline mode: an event-driven run of the whole cluster over the scenario's
// duration, once per seed, pricing every policy on the same failure history.
// Seeds run on run.threads threads; each seed has its own random stream, so
// the output does not depend on the thread count.
#include <array>
#include <cstdint>
#include <vector>

#include "sim/failslow.h"
#include "sim/pricing.h"
#include "sim/scenario.h"
#include "sim/trace.h"

namespace ntp::sim {

using PolicyValues = std::array<double, kPolicyCount>;  // indexed by Policy

// One seed's outcome.
struct TimelineSeed {
  PolicyValues goodput{};          // time-averaged throughput relative to failure-free
  PolicyValues pause_hours{};      // hours with no training progress
  PolicyValues spares_needed{};    // spare domains a fixed-batch job needs never to pause (peak)
  double ckpt_lost_hours = 0;      // ckpt-restart: computed work thrown away
  double boost_energy_kwh = 0;     // ntp-pw: energy drawn above TDP by boosted GPUs
  double failed_fraction = 0;      // time-averaged failed fraction of the job's GPUs
  int peak_failed_gpus = 0;
  int failures = 0;                // failures that hit the job's GPUs
  std::uint64_t failure_digest = 0;  // hash of the job's failures (element, time) in order
  std::vector<PolicyValues> series;  // throughput per bucket
  std::vector<double> failed_series;  // mean failed GPUs per bucket
  std::vector<double> above_threshold;  // per run.thresholds_percent: share of time above it
  // Fail-slow GPUs alone (their own process; fail-stops are the policies'):
  SlowValues slow_goodput{};      // per treatment, time-averaged throughput
  SlowValues slow_pause_hours{};  // per treatment, hours reconfiguring
  int slow_events = 0;            // GPUs that turned slow in the run
};

struct PolicySummary {
  double goodput_mean = 0;
  double goodput_stderr = 0;
  double goodput_min = 0;
  double pause_hours_mean = 0;
  double spares_needed_max = 0;   // spares for zero pause, worst seed
  double spares_needed_mean = 0;  // spares for zero pause, mean over seeds
};

struct TimelineResult {
  double duration_hours = 0;
  double bucket_hours = 0;
  int seeds = 0;
  double ckpt_interval_hours = 0;  // the interval ckpt-restart used
  std::array<PolicySummary, kPolicyCount> policy{};
  double ckpt_lost_hours_mean = 0;
  double boost_energy_kwh_mean = 0;  // ntp-pw, per run
  double failed_fraction_mean = 0;
  double peak_failed_gpus_mean = 0;
  int peak_failed_gpus_max = 0;
  double failures_mean = 0;
  std::vector<PolicyValues> series_mean;  // throughput per bucket, mean over seeds
  std::vector<double> failed_series_mean;
  std::vector<double> above_threshold_mean;  // per run.thresholds_percent, mean over seeds
  std::vector<double> above_threshold_max;   // and the worst seed
  TimelineSeed first_seed;                // seed 0 in full, for the failure timeline plot
  bool failslow = false;                  // failslow.rate_per_gpu_day > 0: the fields below mean something
  std::array<PolicySummary, kSlowTreatmentCount> slow{};  // goodput and pause per treatment
  double slow_events_mean = 0;
};

// The checkpoint interval ckpt-restart uses (hours): the configured one, or
// Young/Daly's sqrt(2 * write time * job MTBF); infinity without failures.
double ckpt_interval_hours(const Scenario& s, const std::vector<TraceFailure>* trace);

TimelineSeed run_timeline_seed(const Scenario& s, const Pricing& pricing,
                               const std::vector<TraceFailure>* trace, int seed_index);

TimelineResult run_timeline(const Scenario& s, const Pricing& pricing,
                            const std::vector<TraceFailure>* trace);

}  // namespace ntp::sim
