#include "layout/replica_layout.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "layout/sync_partition.h"

namespace ntp::layout {

namespace {

void check_active(Unit units, int tp, const std::vector<int>& active, int sync_degree) {
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

// S must be K contiguous intervals covering [0, U) in order, and the shares
// one per active slot, each >= 1, summing to U.
void check_sync_and_shares(Unit units, size_t k, const std::vector<IntervalSet>& sync,
                           const SlotShares& shares) {
  Unit next = 0;
  for (size_t j = 0; j < sync.size(); ++j) {
    if (sync[j].intervals().size() != 1 || sync[j].intervals()[0].start != next)
      throw std::invalid_argument("sync part " + std::to_string(j) + " " + sync[j].to_string() +
                                  " is not the contiguous interval starting at " +
                                  std::to_string(next));
    next = sync[j].intervals()[0].end;
  }
  if (next != units)
    throw std::invalid_argument("sync partition ends at " + std::to_string(next) +
                                ", not at units (" + std::to_string(units) + ")");
  if (shares.units.size() != k)
    throw std::invalid_argument(std::to_string(shares.units.size()) + " shares for " +
                                std::to_string(k) + " active slots");
  Unit total = 0;
  for (size_t i = 0; i < k; ++i) {
    if (shares.units[i] < 1)
      throw std::invalid_argument("share of active slot " + std::to_string(i) + " is " +
                                  std::to_string(shares.units[i]) + ", must be >= 1");
    total += shares.units[i];
  }
  if (total != units)
    throw std::invalid_argument("shares sum to " + std::to_string(total) + ", not to units (" +
                                std::to_string(units) + ")");
}

// The part of S_j its core slot does not keep.
struct Tail {
  Interval units;
  int core = 0;  // core slot j
};

// A slot that holds units outside its own S_j: how many it takes from the tails.
struct Receiver {
  int slot = 0;
  Unit need = 0;
};

// Deals the tails of the sync intervals, in order, to the receivers, in
// order: each takes the next `need` units of the concatenated tails.
void deal_tails(const std::vector<Tail>& tails, const std::vector<Receiver>& receivers,
                ReplicaLayout& layout) {
  size_t j = 0;
  Unit cursor = tails.empty() ? 0 : tails[0].units.start;
  for (const Receiver& r : receivers) {
    for (Unit need = r.need; need > 0;) {
      if (cursor == tails[j].units.end) cursor = tails[++j].units.start;  // next tail
      const Unit take = std::min(need, tails[j].units.end - cursor);
      const IntervalSet piece = IntervalSet::range(cursor, cursor + take);
      layout.slots[static_cast<size_t>(r.slot)].add(piece);
      layout.pre_sync.push_back({r.slot, tails[j].core, piece});
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

ReplicaLayout replica_layout(Unit units, int tp, const std::vector<int>& active,
                             const std::vector<IntervalSet>& sync, const SlotShares& shares) {
  const int sync_degree = static_cast<int>(sync.size());
  check_active(units, tp, active, sync_degree);
  check_sync_and_shares(units, active.size(), sync, shares);
  ReplicaLayout layout;
  layout.active = active;
  layout.core.assign(active.begin(), active.begin() + sync_degree);
  layout.slots.resize(static_cast<size_t>(tp));
  layout.block = shares.block;
  // Core slot j keeps the prefix of S_j its share allows. At equal speeds the
  // share never exceeds |S_j|: both are cut in the kind's block, larger parts
  // first, so share_j <= |S_j| in blocks (ceil(B/k) > |S_j| would need
  // B % k < B % K <= j, where slot j has the smaller share), and the units
  // left over from the blocks sit on the last slot of each (core slot K - 1
  // is last in both only when k == K, and then share_j == |S_j|).
  std::vector<Tail> tails;
  std::vector<Receiver> receivers;
  for (int j = 0; j < sync_degree; ++j) {
    const int slot = active[static_cast<size_t>(j)];
    const Interval s = sync[static_cast<size_t>(j)].intervals()[0];
    const Unit share = shares.units[static_cast<size_t>(j)];
    const Unit keep = std::min(share, s.size());
    layout.slots[static_cast<size_t>(slot)].add(s.start, s.start + keep);
    if (keep < s.size()) tails.push_back({{s.start + keep, s.end}, slot});
    if (share > s.size()) receivers.push_back({slot, share - s.size()});
  }
  for (size_t e = static_cast<size_t>(sync_degree); e < active.size(); ++e)
    receivers.push_back({active[e], shares.units[e]});
  deal_tails(tails, receivers, layout);
  for (const SlotTransfer& t : layout.pre_sync) layout.post_sync.push_back({t.to, t.from, t.units});
  std::sort(layout.post_sync.begin(), layout.post_sync.end(),
            [](const SlotTransfer& a, const SlotTransfer& b) {
              return a.from != b.from ? a.from < b.from : a.to < b.to;
            });
  return layout;
}

ReplicaLayout replica_layout(Unit units, int tp, const std::vector<int>& active, int sync_degree) {
  check_active(units, tp, active, sync_degree);
  const int k = static_cast<int>(active.size());
  SlotShares shares;
  for (int i = 0; i < k; ++i) shares.units.push_back(balanced_share(units, k, i));
  return replica_layout(units, tp, active, sync_partition(units, sync_degree), shares);
}

ReplicaLayout dropped_replica(int tp, const std::vector<int>& active) {
  ReplicaLayout layout;
  layout.dropped = true;
  layout.active = active;
  layout.slots.resize(static_cast<size_t>(tp));
  return layout;
}

}  // namespace ntp::layout
