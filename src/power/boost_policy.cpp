// The boost-and-rebalance policy (see boost_policy.h and docs/power.md).
#include "power/boost_policy.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

namespace ntp::power {
namespace {

// A replica's throughput relative to a healthy one: the part of its need the
// speed-up reaches, speedup / need (k/n * speedup when the need is n/k),
// exactly 1 when the boost covers the need (so equal replicas get equal shares).
double effective_speed(int n, const DomainBoost& boost, int k) {
  if (k <= 0) return 0.0;
  if (boost.need_met) return 1.0;
  const double n_over_k = static_cast<double>(n) / k;
  // k/n * speedup, as written, for the default need (the shares' rounding
  // stays as it was).
  if (boost.need == n_over_k) return std::min(1.0, k * boost.speedup / n);
  return std::min(1.0, boost.speedup / boost.need);
}

[[noreturn]] void reject(const std::string& what) { throw std::invalid_argument(what); }

void validate_active(int n, const std::vector<int>& active, long global_batch) {
  if (n < 1) reject("n (TP degree) must be >= 1, got " + std::to_string(n));
  if (global_batch < 0) reject("global_batch must be >= 0, got " + std::to_string(global_batch));
  bool any_active = false;
  for (std::size_t i = 0; i < active.size(); ++i) {
    if (active[i] < 0 || active[i] > n) {
      reject("active[" + std::to_string(i) + "] = " + std::to_string(active[i]) +
             " is outside [0, n = " + std::to_string(n) + "]");
    }
    any_active = any_active || active[i] > 0;
  }
  if (global_batch > 0 && !any_active) {
    reject("active: no replica has an active GPU to take global_batch = " +
           std::to_string(global_batch));
  }
}

}  // namespace

const char* to_string(BoostCap cap) noexcept {
  switch (cap) {
    case BoostCap::none: return "none";
    case BoostCap::device_max: return "device_max";
    case BoostCap::domain_budget: return "domain_budget";
  }
  return "none";
}

DomainBoost boost_to_need(int n, int k, double need, double headroom_w,
                          const DevicePowerModel& m) noexcept {
  if (k <= 0 || n <= 0) return {};
  if (k >= n) return {m.tdp_w, 1.0, 1.0, true, BoostCap::none};
  if (std::isnan(need) || need <= 0.0) need = static_cast<double>(n) / k;
  need = std::max(need, 1.0);
  const double headroom = headroom_w > 0.0 ? headroom_w : 0.0;  // NaN and negatives count as 0
  const double budget = n * m.tdp_w + headroom;
  // The survivors' equal split, rounded down until k of them fit the budget.
  double split = budget / k;
  while (split * k > budget) split = std::nextafter(split, 0.0);
  const double device_max = m.max_frac * m.tdp_w;
  const double need_limit = m.tdp_w * std::pow(need, 1.0 / m.alpha);
  const double reachable = std::min(split, device_max);
  if (need_limit <= reachable) return {need_limit, need, need, true, BoostCap::none};
  // Short of the need: the speed is what the reachable limit buys, clamped so
  // rounding never lets an unmet domain look faster than a met one.
  const double speed = std::min(std::pow(reachable / m.tdp_w, m.alpha), need);
  const BoostCap cap = device_max <= split ? BoostCap::device_max : BoostCap::domain_budget;
  return {reachable, speed, need, false, cap};
}

double busiest_work_need(const std::vector<UnitWork>& work, int n, int k) {
  const auto busiest = [&](int active) {
    double sum = 0.0;
    for (const UnitWork& w : work) sum += w.cost * static_cast<double>((w.count + active - 1) / active);
    return sum;
  };
  for (std::size_t i = 0; i < work.size(); ++i) {
    if (work[i].count < 0 || !std::isfinite(work[i].cost) || work[i].cost < 0.0) {
      reject("work[" + std::to_string(i) + "]: count and cost must be finite and >= 0");
    }
  }
  if (n < 1) reject("n (TP degree) must be >= 1, got " + std::to_string(n));
  const double healthy = busiest(n);
  if (!(healthy > 0.0)) reject("work: a healthy GPU does no work, the need is undefined");
  if (k <= 0) return 0.0;
  if (k >= n) return 1.0;
  return busiest(k) / healthy;
}

double domain_speedup(int n, int k, double headroom_w, const DevicePowerModel& m) noexcept {
  return boost_to_need(n, k, 0.0, headroom_w, m).speedup;
}

double domain_limit_w(int n, int k, double headroom_w, const DevicePowerModel& m) noexcept {
  return boost_to_need(n, k, 0.0, headroom_w, m).limit_w;
}

void validate(const DevicePowerModel& m) {
  if (!std::isfinite(m.tdp_w) || m.tdp_w <= 0.0) reject("tdp_w must be > 0 W");
  if (!std::isfinite(m.max_frac) || m.max_frac < 1.0) reject("max_frac must be >= 1");
  if (!std::isfinite(m.alpha) || m.alpha <= 0.0) reject("alpha must be > 0");
}

BoostPlan plan_boost(int n, const std::vector<int>& active, double headroom_w, long global_batch,
                     const DevicePowerModel& m) {
  return plan_boost(n, active, {}, headroom_w, global_batch, m);
}

BoostPlan plan_boost(int n, const std::vector<int>& active, const std::vector<double>& needs,
                     double headroom_w, long global_batch, const DevicePowerModel& m) {
  validate(m);
  validate_active(n, active, global_batch);
  if (!std::isfinite(headroom_w) || headroom_w < 0.0) reject("headroom_w must be finite and >= 0");
  if (!needs.empty() && needs.size() != active.size()) {
    reject("needs: " + std::to_string(needs.size()) + " entries for " +
           std::to_string(active.size()) + " replicas");
  }
  BoostPlan plan;
  std::vector<double> weights;
  plan.replicas.reserve(active.size());
  weights.reserve(active.size());
  for (std::size_t i = 0; i < active.size(); ++i) {
    const int k = active[i];
    const DomainBoost boost = boost_to_need(n, k, needs.empty() ? 0.0 : needs[i], headroom_w, m);
    plan.replicas.push_back({k, boost.limit_w, boost.speedup, 0, boost.need, boost.cap});
    weights.push_back(effective_speed(n, boost, k));
  }
  const std::vector<long> shares = apportion(weights, global_batch);
  for (std::size_t i = 0; i < shares.size(); ++i) plan.replicas[i].share = shares[i];
  return plan;
}

std::vector<long> shares_without_boost(int n, const std::vector<int>& active, long global_batch) {
  validate_active(n, active, global_batch);
  std::vector<double> weights;
  weights.reserve(active.size());
  for (const int k : active) weights.push_back(static_cast<double>(k) / n);
  return apportion(weights, global_batch);
}

std::vector<long> apportion(const std::vector<double>& weights, long total) {
  // Quotas are doubles: totals beyond 2^53 would lose whole sequences.
  constexpr long kMaxTotal = 1L << 53;
  if (total < 0 || total > kMaxTotal) {
    reject("apportion: total must be in [0, 2^53], got " + std::to_string(total));
  }
  double weight_sum = 0.0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    if (!std::isfinite(weights[i]) || weights[i] < 0.0) {
      reject("apportion: weight[" + std::to_string(i) + "] must be finite and >= 0");
    }
    weight_sum += weights[i];
  }
  std::vector<long> shares(weights.size(), 0);
  if (total == 0) return shares;
  if (weight_sum <= 0.0) reject("apportion: every weight is 0, cannot place " + std::to_string(total));

  // Floors of the exact quotas, then the remaining units to the largest
  // remainders (ties: lower index). Rounding can leave the floors a unit off in
  // either direction; the same order fixes both.
  std::vector<double> remainder(weights.size(), 0.0);
  long assigned = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    const double quota = static_cast<double>(total) * (weights[i] / weight_sum);
    shares[i] = static_cast<long>(std::floor(quota));
    remainder[i] = quota - static_cast<double>(shares[i]);
    assigned += shares[i];
  }
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] > 0.0) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return remainder[a] > remainder[b]; });
  for (std::size_t j = 0; assigned < total; j = (j + 1) % order.size(), ++assigned) {
    ++shares[order[j]];
  }
  for (std::size_t j = order.size(); assigned > total; --assigned) {
    do {
      j = (j + order.size() - 1) % order.size();
    } while (shares[order[j]] == 0);
    --shares[order[j]];
  }
  return shares;
}

}  // namespace ntp::power
