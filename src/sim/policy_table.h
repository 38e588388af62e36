#pragma once
// What one TP group with k active GPUs is worth under a policy: a table over
// k = 0..tp, built once per scenario from the step model (and, for ntp-pw,
// the shared power policy). The event loop then only looks numbers up.
#include <vector>

#include "power/boost_policy.h"
#include "sim/scenario.h"
#include "sim/step_model.h"

namespace ntp::sim {

struct PolicyTable {
  // Replica contribution relative to a healthy replica when its lowest group
  // has k active GPUs, with proportional batch shares (elastic batch).
  std::vector<double> share;
  // Pace of such a replica relative to a healthy one when it keeps its full
  // share (fixed global batch: the job waits for it).
  std::vector<double> speed;
  // TP degree the group runs (and syncs gradients) at; 0 when it sits out.
  std::vector<int> run_tp;
  // Power above TDP such a group draws (W): ntp-pw's boosted GPUs, run_tp x
  // (limit - TDP); 0 for every other policy.
  std::vector<double> extra_w;
  bool participates(int k) const { return run_tp[static_cast<std::size_t>(k)] > 0; }
};

// The TP degree an NTP group with k active GPUs runs at: tp when healthy,
// else k rounded down to a multiple of tp_step; 0 below min_tp.
int ntp_run_tp(const Scenario& s, int k);

// What the shared power policy decides for a TP group running at run_tp of
// tp: the boost toward the speed-up the step model says it needs, within
// power.max_frac and the group's share of the domain budget.
power::DomainBoost boost_for(const Scenario& s, const StepModel& model, int run_tp);

PolicyTable make_policy_table(Policy policy, const Scenario& s, const StepModel& model);

}  // namespace ntp::sim
