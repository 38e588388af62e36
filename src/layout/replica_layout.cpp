#include "layout/replica_layout.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "layout/sync_partition.h"

namespace ntp::layout {

namespace {

void check_replica_args(Unit units, int tp, const std::vector<int>& active, int sync_degree) {
  const int k = static_cast<int>(active.size());
  for (size_t i = 0; i < active.size(); ++i) {
    if (active[i] < 0 || active[i] >= tp)
      throw std::invalid_argument("active slot " + std::to_string(active[i]) +
                                  " out of range [0, " + std::to_string(tp) + ")");
    if (i > 0 && active[i] <= active[i - 1])
      throw std::invalid_argument("active slots must be ascending and distinct");
  }
  if (sync_degree < 1 || sync_degree > k)
    throw std::invalid_argument("sync degree " + std::to_string(sync_degree) + " must be in [1, " +
                                std::to_string(k) + "] (active slots)");
  if (units < k)
    throw std::invalid_argument("units (" + std::to_string(units) + ") smaller than the " +
                                std::to_string(k) + " active slots");
}

// Deals the tails of the sync intervals, in order, to the extra slots: each
// extra slot takes the next `balanced_share` units of the concatenated tails.
struct Tail {
  Interval units;  // the part of S_j its core slot does not keep
  int core = 0;    // core slot j
};

void deal_tails(Unit units, const std::vector<Tail>& tails, ReplicaLayout& layout) {
  const int k = static_cast<int>(layout.active.size());
  const int sync_degree = static_cast<int>(layout.core.size());
  size_t j = 0;
  Unit cursor = tails.empty() ? 0 : tails[0].units.start;
  for (int e = sync_degree; e < k; ++e) {
    const int extra = layout.active[static_cast<size_t>(e)];
    for (Unit need = balanced_share(units, k, e); need > 0;) {
      if (cursor == tails[j].units.end) cursor = tails[++j].units.start;  // next tail
      const Unit take = std::min(need, tails[j].units.end - cursor);
      const IntervalSet piece = IntervalSet::range(cursor, cursor + take);
      layout.slots[static_cast<size_t>(extra)].add(piece);
      layout.pre_sync.push_back({extra, tails[j].core, piece});
      cursor += take;
      need -= take;
    }
  }
}

}  // namespace

int ReplicaLayout::sync_group(int slot) const {
  auto it = std::find(core.begin(), core.end(), slot);
  return it == core.end() ? -1 : static_cast<int>(it - core.begin());
}

bool ReplicaLayout::is_active(int slot) const {
  return std::binary_search(active.begin(), active.end(), slot);
}

ReplicaLayout replica_layout(Unit units, int tp, const std::vector<int>& active, int sync_degree) {
  check_replica_args(units, tp, active, sync_degree);
  const int k = static_cast<int>(active.size());
  ReplicaLayout layout;
  layout.active = active;
  layout.core.assign(active.begin(), active.begin() + sync_degree);
  layout.slots.resize(static_cast<size_t>(tp));
  // Core slot j keeps the prefix of S_j that its balanced share allows. The
  // larger shares go to the first active slots, which keeps every prefix
  // within S_j: ceil(U/k) > |S_j| only when U % k < U % K <= j.
  std::vector<Tail> tails;
  for (int j = 0; j < sync_degree; ++j) {
    const int slot = active[static_cast<size_t>(j)];
    const Interval s = sync_interval(units, sync_degree, j);
    const Unit keep = balanced_share(units, k, j);
    layout.slots[static_cast<size_t>(slot)].add(s.start, s.start + keep);
    if (s.start + keep < s.end) tails.push_back({{s.start + keep, s.end}, slot});
  }
  deal_tails(units, tails, layout);
  for (const SlotTransfer& t : layout.pre_sync) layout.post_sync.push_back({t.to, t.from, t.units});
  std::sort(layout.post_sync.begin(), layout.post_sync.end(),
            [](const SlotTransfer& a, const SlotTransfer& b) {
              return a.from != b.from ? a.from < b.from : a.to < b.to;
            });
  return layout;
}

ReplicaLayout dropped_replica(int tp, const std::vector<int>& active) {
  ReplicaLayout layout;
  layout.dropped = true;
  layout.active = active;
  layout.slots.resize(static_cast<size_t>(tp));
  return layout;
}

}  // namespace ntp::layout
