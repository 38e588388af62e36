#include "train/slow_ranks.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

namespace ntp::train {
namespace {

// To kSpeedQuantum (divided, not multiplied, so that 0.95 prints as 0.95);
// within the threshold of 1: 1, as a rank that close would not count as off.
double rounded(double speed, double threshold) {
  if (std::abs(speed - 1.0) <= threshold) return 1.0;
  const double steps = std::round(1.0 / kSpeedQuantum);
  return std::max(kSpeedQuantum, std::round(speed * steps) / steps);
}

// The members of each training replica, in slot order, with their positions
// in the member list (= in busy_s).
std::map<int, std::vector<std::size_t>> replica_members(const JobPlan& plan) {
  std::map<int, std::vector<std::size_t>> out;
  const std::vector<int>& members = plan.members();
  for (std::size_t i = 0; i < members.size(); ++i) out[plan.place(members[i]).replica].push_back(i);
  return out;
}

}  // namespace

std::optional<Relayout> SlowRanks::observe(const JobPlan& plan, const std::vector<double>& busy_s) {
  const std::vector<int>& members = plan.members();
  if (busy_s.size() != members.size()) {
    throw std::invalid_argument(
        fmt::format("SlowRanks: {} busy times for {} members", busy_s.size(), members.size()));
  }
  if (warm_up_) {
    warm_up_ = false;  // an epoch's first step builds caches and pages in buffers
    return std::nullopt;
  }
  const ParallelConfig& parallel = plan.parallel();
  Relayout next{parallel.speeds, {}};
  for (const auto& [replica, at] : replica_members(plan)) {
    if (at.size() < 2) continue;  // a replica of one has no peer to be slower than
    std::vector<int> slots;
    for (std::size_t i : at) slots.push_back(plan.place(members[i]).slot);
    std::vector<double> assumed = layout::speeds_of(parallel.speeds, replica, slots);
    const double top = *std::max_element(assumed.begin(), assumed.end());
    for (double& a : assumed) a /= top;
    std::vector<double> rate;
    for (std::size_t i : at) rate.push_back(busy_s[i] > 0 ? plan.work_of(members[i]) / busy_s[i] : 0.0);
    const double fastest = *std::max_element(rate.begin(), rate.end());
    if (!(fastest > 0) || std::find(rate.begin(), rate.end(), 0.0) != rate.end()) continue;
    bool due = false;
    for (std::size_t k = 0; k < at.size(); ++k) {
      const double measured = rate[k] / fastest;
      std::vector<double>& off = off_[members[at[k]]];
      if (std::abs(measured - assumed[k]) > options_.threshold * assumed[k]) {
        off.push_back(measured);
      } else {
        off.clear();
      }
      due = due || static_cast<std::int64_t>(off.size()) >= options_.steps;
    }
    if (!due) continue;
    std::vector<double> speeds(static_cast<std::size_t>(parallel.tp), 1.0);
    for (std::size_t k = 0; k < at.size(); ++k) {
      const int rank = members[at[k]];
      std::vector<double>& off = off_[rank];
      double speed = assumed[k];
      if (static_cast<std::int64_t>(off.size()) >= options_.steps) {
        speed = rounded(std::accumulate(off.begin(), off.end(), 0.0) / static_cast<double>(off.size()), options_.threshold);
        if (speed != assumed[k]) next.changes.push_back({rank, replica, slots[k], assumed[k], speed});
      }
      speeds[static_cast<std::size_t>(slots[k])] = speed;
      off.clear();
    }
    if (std::all_of(speeds.begin(), speeds.end(), [](double s) { return s == 1.0; })) {
      next.speeds.erase(replica);
    } else {
      next.speeds[replica] = std::move(speeds);
    }
  }
  if (next.changes.empty()) return std::nullopt;
  return next;
}

}  // namespace ntp::train
