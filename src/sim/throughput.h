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
  double microbatches;         // m per replica
  double bubble;               // b, in microbatch times
};

struct ThroughputOptions {
  bool pack = false;                // regroup degraded TP groups into as few replicas as possible
  bool fixed_global_batch = false;  // keep the global batch: spares fill the gap, else pause
};

// Elastic batch: the admitted replicas' shares, at the lowest sync degree
// among them. Fixed global batch: each admitted replica takes the samples its
// pace allows (its share), `spare_groups` free healthy spare groups form extra
// replicas; the job runs at the healthy pace (synced at the lowest degree it
// admits) when they take the whole batch, else at the pace they allow: the
// step stretches until they take it, each replica at its own pace (0 only
// when no replica can train).
double throughput(const ReplicaView& view, const PolicyTable& table, const StepTable& steps,
                  const ThroughputOptions& options, int spare_groups = 0);

// Whether the replicas (and `spare_groups` free spare groups forming more)
// take the whole global batch at the healthy pace.
bool takes_full_batch(const ReplicaView& view, const PolicyTable& table, bool pack, int spare_groups);

// Spare domains (of groups_per_domain TP groups each) a fixed-batch job in
// this state needs to take the whole batch: the cheapest mix of completing
// degraded replicas and forming new ones (with `pack`: healthy groups added
// anywhere). Swaps are taken as instant and counted one domain per degraded
// replica, so this is a lower bound when a replica has several failed domains.
int spares_for_full_batch(const ReplicaView& view, const PolicyTable& table, bool pack,
                          int groups_per_domain);

}  // namespace ntp::sim
