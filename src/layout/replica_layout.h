#pragma once
// The replica layout L(U, A, K) and its gradient-sync plan.
//
// A replica with active slots A (ascending, k = |A|) and sync degree K <= k:
// the first K active slots are *core* slots, core slot j joins DP sync group j.
// Core slot j keeps a prefix of S_j; the tails of all S_j go to the k - K
// *extra* slots, so that every active slot holds floor(U/k) or ceil(U/k)
// units (the first U % k active slots hold the larger share). With k == K the
// layout is S itself on the core slots; a healthy replica (A = 0..n-1, K = n)
// has the standard contiguous Megatron layout.
//
// Tails are dealt to the extra slots in order: the tails of S_0, S_1, ...
// are concatenated and cut into consecutive pieces of each extra slot's size.
// Every extra slot then receives from a contiguous run of core slots and every
// core slot sends to a contiguous run of extra slots. The (extra, core) pairs
// form a forest: at most (cores with a tail) + (extra slots) - 1 transfers,
// within k - K - 1 of the lower bound (every core slot with a tail sends at
// least once), and fewer when running sums of tails and loads coincide.
//
// Gradient sync: pre_sync sends each extra slot's piece of S_j to core slot j
// (after it, core slot j holds exactly S_j); post_sync is its exact inverse.
// Only units on extra slots move, and only inside the replica.
#include <vector>

#include "layout/interval_set.h"

namespace ntp::layout {

// `units` move from slot `from` to slot `to` of the same replica.
struct SlotTransfer {
  int from = 0;
  int to = 0;
  IntervalSet units;
  bool operator==(const SlotTransfer&) const = default;
};

struct ReplicaLayout {
  bool dropped = false;                 // sits out (fewer than min_tp active slots): holds nothing
  std::vector<int> active;              // alive slots, ascending (also listed when dropped)
  std::vector<int> core;                // the K core slots in order; empty when dropped
  std::vector<IntervalSet> slots;       // n unit sets, empty for failed slots
  std::vector<SlotTransfer> pre_sync;   // extra -> core, ordered by (from, to)
  std::vector<SlotTransfer> post_sync;  // core -> extra, the inverse of pre_sync

  // Index j of the sync group a core slot joins, or -1 for any other slot.
  int sync_group(int slot) const;
  bool is_core(int slot) const { return sync_group(slot) >= 0; }
  bool is_active(int slot) const;
  bool operator==(const ReplicaLayout&) const = default;
};

// L(units, active, sync_degree) for a replica of `tp` slots. Requires active
// ascending and distinct slots of [0, tp), sync_degree <= |active| <= units.
ReplicaLayout replica_layout(Unit units, int tp, const std::vector<int>& active, int sync_degree);

// A replica that sits out: holds no unit, takes no part in gradient sync.
ReplicaLayout dropped_replica(int tp, const std::vector<int>& active);

}  // namespace ntp::layout
