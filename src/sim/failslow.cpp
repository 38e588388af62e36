// Fail-slow pricing (see failslow.h, docs/sim.md "Fail-slow").
#include "sim/failslow.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <iterator>
#include <map>

namespace ntp::sim {

const char* slow_treatment_name(SlowTreatment t) {
  switch (t) {
    case SlowTreatment::kIgnore: return "ignore";
    case SlowTreatment::kDrop: return "drop";
    case SlowTreatment::kNtpSlow: return "ntp-slow";
  }
  return "?";
}

double sample_slowdown(Rng& rng, const SlowdownSpec& spec) {
  switch (spec.kind) {
    case SlowdownKind::kFixed: return spec.min;
    case SlowdownKind::kUniform: return spec.min + (spec.max - spec.min) * rng.open01();
    case SlowdownKind::kChoice: {
      double u = rng.open01();
      for (std::size_t i = 0; i + 1 < spec.factors.size(); ++i) {
        if (u < spec.probs[i]) return spec.factors[i];
        u -= spec.probs[i];
      }
      return spec.factors.back();
    }
  }
  return spec.min;
}

FailSlowPricing::FailSlowPricing(const Scenario& s, const StepModel& model)
    : model_(model), dp_(s.dp()) {
  if (s.failslow.rate_per_gpu_day <= 0.0) return;  // off: nothing to price
  const SlowdownSpec& d = s.failslow.slowdown;
  constexpr int kMaxSteps = 256;
  min_ = d.min;
  step_ = std::max(0.01, (d.max - d.min) / kMaxSteps);
  std::vector<double> factors = d.factors;
  if (d.kind != SlowdownKind::kChoice) {
    for (long i = 0; min_ + static_cast<double>(i) * step_ <= d.max + 1e-9; ++i) {
      factors.push_back(min_ + static_cast<double>(i) * step_);
    }
  }
  const int n = model_.tp();
  const double tau = model_.microbatch_s(n);
  const double comm = tau - model_.compute_s(n);  // TP all-reduce and p2p: as a healthy group's
  for (const double f : factors) {
    std::vector<double> speeds(static_cast<std::size_t>(n), 1.0);
    speeds[0] = 1.0 / f;  // slot 0 holds the largest share at equal counts: the worst place
    std::array<double, 2>& p = paces_[grid_index(f)];
    p[0] = tau / (model_.compute_with_speeds_s(speeds, false) + comm);
    p[1] = tau / (model_.compute_with_speeds_s(speeds, true) + comm);
  }
}

long FailSlowPricing::grid_index(double factor) const {
  return std::lround((factor - min_) / step_);
}

const std::array<double, 2>& FailSlowPricing::paces(double factor) const {
  static const std::array<double, 2> kHealthy{1.0, 1.0};
  if (paces_.empty()) return kHealthy;  // fail-slow is off
  auto it = paces_.lower_bound(grid_index(factor));
  if (it == paces_.end()) it = std::prev(it);  // beyond the grid: its last factor
  return it->second;
}

double FailSlowPricing::stage_pace(SlowTreatment t, double factor) const {
  if (t == SlowTreatment::kDrop) return 0.0;
  return paces(factor)[t == SlowTreatment::kIgnore ? 0 : 1];
}

double FailSlowPricing::value(SlowTreatment t, const std::vector<SlowGpu>& slow) const {
  if (slow.empty()) return 1.0;
  // The slowest stage of each replica with a slow GPU (a group with two slow
  // GPUs is priced as its slowest one).
  std::map<int, double> replica_pace;
  for (const SlowGpu& g : slow) {
    const double pace = stage_pace(t, g.factor);
    auto [it, added] = replica_pace.emplace(g.replica, pace);
    if (!added) it->second = std::min(it->second, pace);
  }
  const double healthy = model_.step_s(model_.tp());
  const double pipeline = (model_.microbatches() + model_.bubble_ratio()) * model_.microbatch_s(model_.tp());
  const double slowed = static_cast<double>(replica_pace.size());
  switch (t) {
    case SlowTreatment::kIgnore: {
      // Every replica waits for the slowest: the pipeline runs at its pace.
      double pace = 1.0;
      for (const auto& [replica, p] : replica_pace) pace = std::min(pace, p);
      return healthy / (pipeline / pace + healthy - pipeline);
    }
    case SlowTreatment::kDrop: return (dp_ - slowed) / dp_;
    case SlowTreatment::kNtpSlow: {
      double shares = 0.0;
      for (const auto& [replica, p] : replica_pace) shares += model_.proportional_share(std::min(1.0, p));
      return (dp_ - slowed + shares) / dp_;
    }
  }
  return 1.0;
}

}  // namespace ntp::sim
