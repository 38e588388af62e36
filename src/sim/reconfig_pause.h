#pragma once
// The pause of one reconfiguration, from the layout library's transition
// plans rather than a constant (docs/sim.md, "Reconfiguration pause"): the
// training state the busiest GPU moves over the scale-up and scale-out links,
// plus a fixed protocol cost, plus (after a failure) the step redone. Pure,
// once per scenario.
#include "sim/scenario.h"
#include "sim/step_model.h"

namespace ntp::sim {

// What one reconfiguration costs the job.
struct ReconfigPause {
  double failure_s = 0;  // pause after a failure (the constant reconfig_s when set)
  double rejoin_s = 0;   // pause after a repair or a swap (the constant rejoin_s when set)
  // From the plans, whether or not a constant overrides them:
  double failure_move_s = 0;    // the busiest GPU's transfers after a failure
  double rejoin_move_s = 0;     // and after a repair
  double failure_bytes_up = 0;  // the busiest GPU's bytes on the scale-up links (sent or received)
  double failure_bytes_out = 0; // and on the scale-out links
  double rejoin_bytes_up = 0;
  double rejoin_bytes_out = 0;
};

// The transitions of one TP group of the scenario, planned for each unit kind
// of a stage (stage_units) in a job of min(dp, tp) replicas (at least 2; the
// group's and healthy peers): a failure takes min(blast_radius, tp) slots of the group's replica
// (slots 0..), whose units the survivors then hold and pull from the peer
// replica's GPUs (scale-out) or their own (scale-up); a repair is the reverse,
// the rejoining slots fed by their own replica. Each moved unit carries
// `model.state_bytes` per parameter. A GPU's transfer time is its larger of
// sent and received bytes per link, over the link's achieved bandwidth, the
// two links one after the other. failure_s = protocol_s + move + the healthy
// step (the step in flight is redone); rejoin_s = protocol_s + move (a rejoin
// waits for a step boundary).
ReconfigPause reconfig_pause(const Scenario& s, const StepModel& model);

}  // namespace ntp::sim
