#include "sim/replica_view.h"

#include <algorithm>
#include <stdexcept>

namespace ntp::sim {

ReplicaView::ReplicaView(int groups, int pp, int tp)
    : tp_(tp), pp_(pp), k_(static_cast<std::size_t>(groups), tp),
      replica_min_(static_cast<std::size_t>(groups / pp), tp),
      group_hist_(static_cast<std::size_t>(tp + 1), 0),
      replica_hist_(static_cast<std::size_t>(tp + 1), 0) {
  if (groups % pp != 0) throw std::invalid_argument("ReplicaView: groups % pp != 0");
  reset();
}

void ReplicaView::reset() {
  std::fill(k_.begin(), k_.end(), tp_);
  std::fill(replica_min_.begin(), replica_min_.end(), tp_);
  std::fill(group_hist_.begin(), group_hist_.end(), 0);
  std::fill(replica_hist_.begin(), replica_hist_.end(), 0);
  group_hist_[static_cast<std::size_t>(tp_)] = groups();
  replica_hist_[static_cast<std::size_t>(tp_)] = replicas();
}

void ReplicaView::set_active(int group, int k) {
  const auto g = static_cast<std::size_t>(group);
  const int old = k_[g];
  if (old == k) return;
  --group_hist_[static_cast<std::size_t>(old)];
  ++group_hist_[static_cast<std::size_t>(k)];
  k_[g] = k;
  const auto r = static_cast<std::size_t>(group / pp_);
  const auto first = k_.begin() + static_cast<std::ptrdiff_t>(r * static_cast<std::size_t>(pp_));
  const int low = *std::min_element(first, first + pp_);
  if (low != replica_min_[r]) {
    --replica_hist_[static_cast<std::size_t>(replica_min_[r])];
    ++replica_hist_[static_cast<std::size_t>(low)];
    replica_min_[r] = low;
  }
}

}  // namespace ntp::sim
