#pragma once
// A policy's throughput for one state of the job, relative to the
// failure-free job (formulas: docs/sim.md, "Policies").
#include <vector>

#include "sim/policy_table.h"
#include "sim/replica_view.h"
#include "sim/step_model.h"

namespace ntp::sim {

// Step times per sync degree K = 0..tp, so the event loop never recomputes them.
struct StepTable {
  explicit StepTable(const StepModel& model);
  std::vector<double> step_s;  // step_s[K]; step_s[tp] is the healthy step
  double pipeline_s;           // (m + b) * tau at the healthy pace
};

struct ThroughputOptions {
  bool pack = false;                // regroup degraded TP groups into as few replicas as possible
  bool fixed_global_batch = false;  // every replica keeps its share; the job waits or pauses
};

double throughput(const ReplicaView& view, const PolicyTable& table, const StepTable& steps,
                  const ThroughputOptions& options);

}  // namespace ntp::sim
