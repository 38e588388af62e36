// Worked examples of the share rule (shares.h): aligned blocks, the
// effective block, speed-weighted shares and the remainder.
#include "layout/shares.h"

#include <gtest/gtest.h>

namespace ntp::layout {
namespace {

std::vector<double> equal(int k) {
  return std::vector<double>(static_cast<size_t>(k), 1.0);
}

TEST(Shares, BlockOneAtEqualSpeedsIsTodaysFloorCeilSplit) {
  for (Unit units : {7, 10, 256, 3072, 50257, 50304})
    for (int k : {1, 2, 3, 5, 7, 71, 72}) {
      if (units < k) continue;
      const SlotShares s = slot_shares(units, 1, equal(k));
      EXPECT_EQ(s.block, 1);
      for (int i = 0; i < k; ++i) {
        EXPECT_EQ(s.units[static_cast<size_t>(i)], balanced_share(units, k, i))
            << units << " over " << k;
        EXPECT_EQ(aligned_share(units, k, i, 1), balanced_share(units, k, i));
      }
    }
}

TEST(Shares, AlignedSharesAreBlocksLargerFirstRemainderOnTheLast) {
  // 480B FFN at TP 30: 1,280 blocks of 64, 20 slots of 43 blocks, 10 of 42.
  const SlotShares ffn = slot_shares(81920, 64, equal(30));
  EXPECT_EQ(ffn.units[0], 43 * 64);
  EXPECT_EQ(ffn.units[19], 43 * 64);
  EXPECT_EQ(ffn.units[20], 42 * 64);
  // Llama-small's 688 neurons in blocks of 8 over 3: 86 blocks = 29 + 29 + 28.
  EXPECT_EQ(slot_shares(688, 8, equal(3)).units, (std::vector<Unit>{232, 232, 224}));
  // 1,000 in blocks of 64 over 3: 15 blocks (5 each), 40 left over on the last.
  EXPECT_EQ(slot_shares(1000, 64, equal(3)).units, (std::vector<Unit>{320, 320, 360}));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(aligned_share(1000, 3, i, 64), (i == 2 ? 360 : 320));
}

TEST(Shares, KindBlockHalvesUntilEightBlocksPerSlot) {
  EXPECT_EQ(kind_block(3072, 3, 64), 64);    // GPT-2 124M FFN at TP 3: 16 blocks a slot
  EXPECT_EQ(kind_block(3072, 8, 64), 32);    // at TP 8: 48 blocks of 64 would be 6 a slot
  EXPECT_EQ(kind_block(256, 3, 64), 8);      // the tiny preset: 32 blocks of 8
  EXPECT_EQ(kind_block(81920, 32, 64), 64);  // 480B FFN at TP 32
  EXPECT_EQ(kind_block(131072, 72, 64), 64);
  EXPECT_EQ(kind_block(5, 4, 64), 1);
  EXPECT_EQ(kind_block(1000, 4, 48), 24);  // not a power of two: 48, 24, ...
  EXPECT_EQ(kind_block(12, 4, 1), 1);
  EXPECT_THROW(kind_block(12, 4, 0), std::invalid_argument);
}

TEST(Shares, SpeedsWeighTheShares) {
  // Slot 2 at half speed holds half a share: 3.5 slots' worth of 448 blocks.
  const SlotShares s = slot_shares(448 * 64, 64, {1.0, 1.0, 0.5, 1.0});
  EXPECT_EQ(s.block, 64);
  EXPECT_EQ(s.units, (std::vector<Unit>{128 * 64, 128 * 64, 64 * 64, 128 * 64}));
  // Not divisible: the busiest time is the optimum, ties to the lowest index.
  const SlotShares t = slot_shares(10, 1, {1.0, 0.5});
  EXPECT_EQ(t.units, (std::vector<Unit>{7, 3}));  // times 7 and 6 (6 + 4 would be 6 and 8)
}

TEST(Shares, ASlowSlotHalvesTheBlockUntilItGetsOne) {
  // 8 blocks of 64 over speeds 1, 1, 1, 0.3: the slow slot would get none
  // (3, 3, 2, 0); at block 32 it gets one (5, 5, 5, 1).
  const SlotShares s = slot_shares(512, 64, {1.0, 1.0, 1.0, 0.3});
  EXPECT_EQ(s.block, 32);
  EXPECT_EQ(s.units, (std::vector<Unit>{160, 160, 160, 32}));
  // At speed 0.05 its first block only pays at 20 blocks a slot: block 8.
  EXPECT_EQ(slot_shares(512, 64, {1.0, 1.0, 1.0, 0.05}).units,
            (std::vector<Unit>{168, 168, 168, 8}));
  // At block 1 every slot holds at least one unit, whatever its speed.
  EXPECT_EQ(slot_shares(3, 1, {1.0, 1.0, 0.01}).units, (std::vector<Unit>{1, 1, 1}));
}

TEST(Shares, RemainderGoesWhereItFinishesFirst) {
  // Equal speeds: the 3 units left over from 2 blocks of 4 go to the last slot.
  EXPECT_EQ(slot_shares(11, 4, {1.0, 1.0}).units, (std::vector<Unit>{4, 7}));
  // 19 units in blocks of 4 at speeds 1 and 0.5: blocks 3 and 1 (times 12
  // and 8), then the 3 left over to the slow slot (7 / 0.5 = 14 < 15 / 1).
  EXPECT_EQ(slot_shares(19, 4, {1.0, 0.5}).units, (std::vector<Unit>{12, 7}));
}

TEST(Shares, RejectsBadArguments) {
  EXPECT_THROW(slot_shares(2, 1, equal(3)), std::invalid_argument);  // fewer units than slots
  EXPECT_THROW(slot_shares(8, 1, {}), std::invalid_argument);
  EXPECT_THROW(slot_shares(8, 0, equal(2)), std::invalid_argument);
  EXPECT_THROW(slot_shares(8, 1, {1.0, 0.0}), std::invalid_argument);
  EXPECT_THROW(slot_shares(8, 1, {1.0, -1.0}), std::invalid_argument);
}

}  // namespace
}  // namespace ntp::layout
