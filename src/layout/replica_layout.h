#pragma once
// The replica layout L(U, A, K) and its gradient-sync plan.
//
// A replica with active slots A (ascending, k = |A|) and sync degree K <= k:
// the first K active slots are *core* slots, core slot j joins DP sync group j.
// Every active slot holds its share of the units (shares.h: in aligned
// blocks, by slot speed); the rest is how the units are placed. Core slot j
// keeps a prefix of S_j, min(share_j, |S_j|) units; the tails of the S_j go
// to the *receivers*: the k - K extra slots, and core slots whose share
// exceeds |S_j| (only with unequal speeds: at equal speeds share_j <= |S_j|,
// see replica_layout.cpp). With k == K and equal speeds the layout is S
// itself on the core slots; a healthy replica (A = 0..n-1, K = n) has the
// standard contiguous Megatron layout.
//
// Tails are dealt to the receivers in order: the tails of S_0, S_1, ... are
// concatenated and cut into consecutive pieces of each receiver's need (its
// share, or for a core slot share_j - |S_j|). Every receiver then holds
// pieces of a contiguous run of S_j and every core slot with a tail sends to a
// contiguous run of receivers. The (receiver, core) pairs form a forest: at
// most (cores with a tail) + (receivers) - 1 transfers, within receivers - 1
// of the lower bound (every core slot with a tail sends at least once), and
// fewer when running sums of tails and needs coincide.
//
// Gradient sync: pre_sync sends each piece of S_j that another slot holds to
// core slot j (after it, core slot j holds exactly S_j); post_sync is its
// exact inverse. Only the dealt pieces move, and only inside the replica.
#include <vector>

#include "layout/interval_set.h"
#include "layout/shares.h"

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
  std::vector<SlotTransfer> pre_sync;   // receiver -> core, ordered by (from, to)
  std::vector<SlotTransfer> post_sync;  // core -> receiver, the inverse of pre_sync
  Unit block = 1;                       // the block its shares were cut in (shares.h)

  // Index j of the sync group a core slot joins, or -1 for any other slot.
  int sync_group(int slot) const;
  bool is_core(int slot) const { return sync_group(slot) >= 0; }
  bool is_active(int slot) const;
  bool operator==(const ReplicaLayout&) const = default;
};

// L for a replica of `tp` slots: `sync` is S(U, K) (K contiguous intervals
// covering [0, units) in order), `shares` the units of each active slot and
// their block (slot_shares; each >= 1, summing to units). Requires active ascending and
// distinct slots of [0, tp), 1 <= K <= |active| <= units. Throws
// std::invalid_argument naming what is wrong.
ReplicaLayout replica_layout(Unit units, int tp, const std::vector<int>& active,
                             const std::vector<IntervalSet>& sync, const SlotShares& shares);

// The same with block 1 and equal speeds: S(units, sync_degree) and the
// floor/ceil shares, larger first (the simulator's step model asks this).
ReplicaLayout replica_layout(Unit units, int tp, const std::vector<int>& active, int sync_degree);

// A replica that sits out: holds no unit, takes no part in gradient sync.
ReplicaLayout dropped_replica(int tp, const std::vector<int>& active);

}  // namespace ntp::layout
