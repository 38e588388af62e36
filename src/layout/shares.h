#pragma once
// How many units of one kind each active slot of a replica holds (its share),
// and the sync partition's part sizes: the one share rule of the layout layer.
//
// GEMMs run fastest on widths that are multiples of a tile (a tensor-core GEMM
// of odd width runs at about a quarter of its speed, DESIGN §3), so shares of
// neuron-like kinds are cut in blocks of `align` units; heads are whole units
// (align 1). A kind's effective block is `align` halved until the job's base
// degree n gets at least kMinBlocksPerSlot blocks per slot: one block is then
// at most 1/8 of a share, so aligning costs at most 1/8 of a share in balance
// (without it, the tiny preset's 256 neurons at TP 3 in blocks of 64 would be
// 128 / 64 / 64: the MLP 1.5x slower than 86 / 85 / 85). The block is fixed
// per job and kind, so S(U, K) and every replica's layout share one grid.
//
// Shares follow slot speeds: a slot at half speed gets half the share. Blocks
// go one at a time to the slot that would finish its share first
// ((blocks + 1) / speed smallest, ties to the lowest index): this minimises
// the busiest slot's blocks / speed, which is at most the ideal
// B / sum(speeds) plus (k - 1) / sum(speeds) blocks, i.e. less than one block
// at the mean speed. The U mod block units left over go to the slot that then
// finishes first (ties to the highest index: with equal speeds, the last
// slot). When some slot would get no block (a very slow slot), the replica
// halves its block until each gets one; at block 1 every slot gets at least
// one unit (a slot must hold >= 1 unit of each kind).
//
// With equal speeds this is the floor/ceil split in blocks, larger parts
// first, the remainder on the last part; with block 1, exactly
// balanced_share: today's layouts.
#include <vector>

#include "layout/interval_set.h"

namespace ntp::layout {

inline constexpr Unit kMinBlocksPerSlot = 8;

// Number of units of part `index` when `units` are split into `parts` nearly
// equal parts, the larger parts first: floor(U/parts) + (index < U % parts).
Unit balanced_share(Unit units, int parts, int index);

// The same in blocks of `block` units, the U mod block units left over on the
// last part: block * balanced_share(U / block, parts, index) (+ U mod block).
Unit aligned_share(Unit units, int parts, int index, Unit block);

// The effective block of a kind of `units` units in a job of base degree
// `tp`: `align` halved (integer division) until units >= kMinBlocksPerSlot *
// tp * block, or 1. Requires align >= 1, tp >= 1.
Unit kind_block(Unit units, int tp, Unit align);

struct SlotShares {
  Unit block = 1;           // the block the shares were cut in (<= the block asked for)
  std::vector<Unit> units;  // per active slot, in order; sums to the kind's units
  bool operator==(const SlotShares&) const = default;
};

// Shares of `units` over slots of `speeds` (one per active slot, finite > 0),
// cut in blocks of `block` (see above). Requires units >= speeds.size() >= 1.
SlotShares slot_shares(Unit units, Unit block, const std::vector<double>& speeds);

}  // namespace ntp::layout
