#pragma once
// Everything needed to price a state of the job under each policy, built
// once per scenario: the step model, its step-time table and one value table
// per policy.
#include <array>

#include "sim/policy_table.h"
#include "sim/replica_view.h"
#include "sim/scenario.h"
#include "sim/step_model.h"
#include "sim/throughput.h"

namespace ntp::sim {

class Pricing {
 public:
  explicit Pricing(const Scenario& s);

  const StepModel& model() const { return model_; }
  const PolicyTable& table(Policy p) const { return tables_[static_cast<std::size_t>(p)]; }
  // Whether the policy draws on the spare pool: `spares` always; every
  // policy when the global batch is fixed (spares fill the gap).
  bool uses_spares(Policy p) const;
  // Throughput relative to failure-free, given the job without spares (raw)
  // and with the spare pool applied (spared). ckpt-restart has no static
  // value: it restarts at full size, and its cost is in the timeline.
  double value(Policy p, const ReplicaView& raw, const ReplicaView& spared) const;

 private:
  StepModel model_;
  StepTable steps_;
  std::array<PolicyTable, kPolicyCount> tables_;
  ThroughputOptions options_;
};

}  // namespace ntp::sim
