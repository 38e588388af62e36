// Per-k value tables of each policy (see policy_table.h, docs/sim.md "Policies").
#include "sim/policy_table.h"

#include <algorithm>


namespace ntp::sim {

int ntp_run_tp(const Scenario& s, int k) {
  const int tp = s.parallel.tp;
  if (k >= tp) return tp;
  const int step = s.parallel.tp_step;
  const int run = (k / step) * step;
  return run >= s.min_tp() && run > 0 ? run : 0;
}

power::DomainBoost boost_for(const Scenario& s, const StepModel& model, int run_tp) {
  // A TP group is the power domain; with several groups per NVLink domain
  // each gets its share of the domain's headroom.
  const int tp = s.parallel.tp;
  const power::DevicePowerModel device{s.cluster.tdp_w, s.power.max_frac, s.power.alpha};
  const double headroom = s.power.headroom_w * tp / s.cluster.domain_size;
  const double need = run_tp > 0 && run_tp < tp ? model.needed_speedup(run_tp) : 1.0;
  return power::boost_to_need(tp, run_tp, need, headroom, device);
}

PolicyTable make_policy_table(Policy policy, const Scenario& s, const StepModel& model) {
  const int tp = s.parallel.tp;
  const auto size = static_cast<std::size_t>(tp + 1);
  PolicyTable t{std::vector<double>(size, 0.0), std::vector<double>(size, 0.0),
                std::vector<int>(size, 0), std::vector<double>(size, 0.0)};
  const bool degrades = policy == Policy::kNtp || policy == Policy::kNtpPw;
  for (int k = 0; k <= tp; ++k) {
    const auto i = static_cast<std::size_t>(k);
    const int highest = degrades ? ntp_run_tp(s, k) : (k == tp ? tp : 0);
    if (highest == 0) continue;
    if (highest == tp) {
      t.run_tp[i] = tp;
      t.speed[i] = 1.0;
      continue;
    }
    // A degraded group may run below its k when that is faster (with boost,
    // fewer GPUs get more power each; heads split more evenly at some degrees).
    for (int run = highest; run >= s.min_tp() && run > 0; run -= s.parallel.tp_step) {
      const double speedup = policy == Policy::kNtpPw ? boost_for(s, model, run).speedup : 1.0;
      const double speed = std::min(1.0, model.stage_speed(run, speedup));
      if (speed > t.speed[i]) {
        t.speed[i] = speed;
        t.run_tp[i] = run;
      }
    }
  }
  // A group never gains by losing a GPU: keep the pace non-decreasing in k
  // (smaller TP traffic could otherwise favour the smaller group by ~1e-4).
  for (int k = tp - 1; k >= 0; --k) {
    const auto i = static_cast<std::size_t>(k);
    t.speed[i] = std::min(t.speed[i], t.speed[i + 1]);
  }
  for (std::size_t i = 0; i < size; ++i) {
    t.share[i] = t.run_tp[i] > 0 ? model.proportional_share(t.speed[i]) : 0.0;
    if (policy == Policy::kNtpPw && t.run_tp[i] > 0 && t.run_tp[i] < tp) {
      t.extra_w[i] = t.run_tp[i] * (boost_for(s, model, t.run_tp[i]).limit_w - s.cluster.tdp_w);
    }
  }
  return t;
}

}  // namespace ntp::sim
