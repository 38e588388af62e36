#pragma once
// Everything needed to price a state of the job under each policy, built
// once per scenario: the step model, its step-time table and one value table
// per policy.
#include <array>

#include "sim/failslow.h"
#include "sim/policy_table.h"
#include "sim/reconfig_pause.h"
#include "sim/replica_view.h"
#include "sim/scenario.h"
#include "sim/step_model.h"
#include "sim/throughput.h"

namespace ntp::sim {

class Pricing {
 public:
  explicit Pricing(const Scenario& s);

  const StepModel& model() const { return model_; }
  // The pause of one reconfiguration after a failure and after a repair or swap.
  const ReconfigPause& pause() const { return pause_; }
  const PolicyTable& table(Policy p) const { return tables_[static_cast<std::size_t>(p)]; }
  // Fail-slow GPUs under each treatment (failslow.h).
  const FailSlowPricing& failslow() const { return failslow_; }
  // Whether the policy draws on the spare pool: `spares` always; every
  // policy when the global batch is fixed (spares fill the gap).
  bool uses_spares(Policy p) const;
  // Throughput relative to failure-free, given the job without spares (raw)
  // and with the spare pool applied (spared), and the free healthy spare
  // domains (with a fixed global batch they form extra replicas).
  // ckpt-restart has no static value: it restarts at full size, and its cost
  // is in the timeline.
  double value(Policy p, const ReplicaView& raw, const ReplicaView& spared,
               int free_spare_domains = 0) const;
  // Spare domains the policy needs for a fixed-batch job in the state `raw`
  // to take the whole global batch (throughput.h, spares_for_full_batch).
  int spares_needed(Policy p, const ReplicaView& raw) const;
  // With a fixed global batch, the policy swaps a spare in for a job domain
  // with a TP group below this many active GPUs (completing its replica) and
  // keeps the other spares free to form new replicas: completing gains the
  // replica 1 - share, a spare forming replicas gains groups_per_domain / pp.
  int complete_below(Policy p) const;

 private:
  StepModel model_;
  ReconfigPause pause_;
  StepTable steps_;
  std::array<PolicyTable, kPolicyCount> tables_;
  FailSlowPricing failslow_;
  ThroughputOptions options_;
  int groups_per_domain_;
  double forming_gain_;  // replicas a spare domain forms: groups_per_domain / pp, at most 1
};

}  // namespace ntp::sim
