// Reconfiguration pause from the transition plans (see reconfig_pause.h).
#include "sim/reconfig_pause.h"

#include <algorithm>
#include <vector>

#include "layout/job_layout.h"
#include "layout/transition.h"

namespace ntp::sim {
namespace {

// Bytes one GPU sends and receives on each kind of link.
struct GpuTraffic {
  double up_sent = 0, up_received = 0, out_sent = 0, out_received = 0;
  double up() const { return std::max(up_sent, up_received); }
  double out() const { return std::max(out_sent, out_received); }
};

struct Busiest {
  double seconds = 0, bytes_up = 0, bytes_out = 0;
};

// The busiest GPU of a job moving from `before` to `after` failed slots of
// replica 0, for every unit kind of a stage. The job has min(dp, tp)
// replicas (at least 2): enough peers for the refill to spread over as it
// does in the full job, where every survivor's piece may come from another one.
Busiest busiest_move(const Scenario& s, const StepModel& model, const std::vector<int>& before,
                     const std::vector<int>& after) {
  const int n = s.parallel.tp;
  const int replicas = std::max(2, std::min(s.dp(), n));
  std::vector<GpuTraffic> gpus(static_cast<std::size_t>(replicas * n));
  const auto at = [&](layout::SlotRef slot) -> GpuTraffic& {
    return gpus[static_cast<std::size_t>(slot.replica * n + slot.slot)];
  };
  for (const StageUnits& kind : stage_units(s)) {
    const auto job = [&](const std::vector<int>& failed) {
      layout::JobConfig c{kind.units, n, replicas, {}, 1};
      if (!failed.empty()) c.failed[0] = failed;
      return layout::plan_job(c);
    };
    const layout::TransitionPlan plan = layout::plan_transition(job(before), job(after));
    for (const layout::Move& m : plan.moves) {
      const double bytes = static_cast<double>(m.units.size()) * kind.elements * s.model.state_bytes;
      (m.cross_domain ? at(m.from).out_sent : at(m.from).up_sent) += bytes;
      (m.cross_domain ? at(m.to).out_received : at(m.to).up_received) += bytes;
    }
  }
  Busiest b;
  for (const GpuTraffic& g : gpus) {
    const double seconds = g.up() / model.nvlink_Bps() + g.out() / model.nic_Bps();
    if (seconds > b.seconds) b = {seconds, g.up(), g.out()};
  }
  return b;
}

}  // namespace

ReconfigPause reconfig_pause(const Scenario& s, const StepModel& model) {
  std::vector<int> lost;
  for (int slot = 0; slot < std::min(s.failures.blast_radius, s.parallel.tp); ++slot) lost.push_back(slot);
  // A group left with no slot sits out: nothing is moved to it.
  if (static_cast<int>(lost.size()) == s.parallel.tp) lost.pop_back();
  const Busiest fail = busiest_move(s, model, {}, lost);
  const Busiest rejoin = busiest_move(s, model, lost, {});
  ReconfigPause p;
  p.failure_move_s = fail.seconds;
  p.rejoin_move_s = rejoin.seconds;
  p.failure_bytes_up = fail.bytes_up;
  p.failure_bytes_out = fail.bytes_out;
  p.rejoin_bytes_up = rejoin.bytes_up;
  p.rejoin_bytes_out = rejoin.bytes_out;
  const PolicySpec& c = s.policies;
  p.failure_s = c.reconfig_s.value_or(c.protocol_s + fail.seconds + model.healthy().step_s);
  p.rejoin_s = c.rejoin_s.value_or(c.protocol_s + rejoin.seconds);
  return p;
}

}  // namespace ntp::sim
