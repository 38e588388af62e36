// Worked examples of S(U, K), L(U, A, K) and the gradient-sync plan.
#include <gtest/gtest.h>

#include "layout/replica_layout.h"
#include "layout/sync_partition.h"

namespace ntp::layout {
namespace {

TEST(SyncPartition, LargerPartsFirstAndContiguous) {
  EXPECT_EQ(sync_partition(10, 3), (std::vector<IntervalSet>{{{0, 4}}, {{4, 7}}, {{7, 10}}}));
  EXPECT_EQ(sync_interval(50304, 72, 0), (Interval{0, 699}));
  EXPECT_EQ(sync_interval(50304, 72, 71), (Interval{50304 - 698, 50304}));
  EXPECT_THROW(sync_interval(10, 3, 3), std::out_of_range);
}

TEST(ReplicaLayout, ExtraSlotTakesTheTailsOfTheCoreSlots) {
  // U = 10, slots {0,1,2,3} alive, K = 3 (a peer replica runs with 3 slots).
  // S = [0,4) [4,7) [7,10); loads 3,3,2,2.
  const ReplicaLayout l = replica_layout(10, 4, {0, 1, 2, 3}, 3);
  EXPECT_EQ(l.core, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(l.slots[0], (IntervalSet{{0, 3}}));
  EXPECT_EQ(l.slots[1], (IntervalSet{{4, 7}}));
  EXPECT_EQ(l.slots[2], (IntervalSet{{7, 9}}));
  EXPECT_EQ(l.slots[3], (IntervalSet{{3, 4}, {9, 10}}));
  EXPECT_EQ(l.pre_sync, (std::vector<SlotTransfer>{{3, 0, {{3, 4}}}, {3, 2, {{9, 10}}}}));
  EXPECT_EQ(l.post_sync, (std::vector<SlotTransfer>{{0, 3, {{3, 4}}}, {2, 3, {{9, 10}}}}));
  EXPECT_EQ(l.sync_group(2), 2);
  EXPECT_EQ(l.sync_group(3), -1);
}

TEST(ReplicaLayout, FailedSlotInTheMiddleKeepsCoreOrder) {
  // Slot 1 failed: core slots are the first K alive ones, not slot ids 0..K-1.
  const ReplicaLayout l = replica_layout(12, 4, {0, 2, 3}, 3);
  EXPECT_EQ(l.core, (std::vector<int>{0, 2, 3}));
  EXPECT_TRUE(l.slots[1].empty());
  EXPECT_EQ(l.slots[2], (IntervalSet{{4, 8}}));
  EXPECT_TRUE(l.pre_sync.empty());
  EXPECT_EQ(l.sync_group(2), 1);
}

TEST(ReplicaLayout, EachExtraSlotDrawsOnAContiguousRunOfCoreSlots) {
  // n = 72 healthy replica in a job whose smallest replica has 64 slots.
  const std::vector<int> all = [] {
    std::vector<int> s(72);
    for (int i = 0; i < 72; ++i) s[static_cast<size_t>(i)] = i;
    return s;
  }();
  const ReplicaLayout l = replica_layout(50304, 72, all, 64);
  int last_core = -1;
  for (const SlotTransfer& t : l.pre_sync) {
    EXPECT_GE(t.to, last_core) << "cores are visited in order";
    last_core = t.to;
  }
  EXPECT_LE(l.pre_sync.size(), 71u);  // a forest over 64 cores + 8 extras
  for (int slot = 64; slot < 72; ++slot)
    EXPECT_EQ(l.slots[static_cast<size_t>(slot)].size(), 50304 / 72 + (slot < 50304 % 72));
}

TEST(SyncPartition, AlignedPartsAreBlocksWithTheRemainderLast) {
  // 1,000 units in blocks of 64 over 3: 15 blocks (5 each), 40 left over.
  EXPECT_EQ(sync_partition(1000, 3, 64),
            (std::vector<IntervalSet>{{{0, 320}}, {{320, 640}}, {{640, 1000}}}));
  EXPECT_EQ(sync_interval(3072, 5, 2, 64), (Interval{1280, 1920}));  // 10, 10, 10, 9, 9 blocks
  EXPECT_EQ(sync_interval(3072, 5, 4, 64), (Interval{2496, 3072}));
  EXPECT_THROW(sync_interval(10, 3, 0, 0), std::invalid_argument);
}

TEST(ReplicaLayout, ACoreSlotWithMoreThanItsPartReceivesTailsLikeAnExtraSlot) {
  // U = 12, K = k = 3, S = [0,4) [4,8) [8,12); slot 0 twice as fast as the
  // others holds 6: all of S_0 plus the tails of S_1 and S_2.
  const ReplicaLayout l =
      replica_layout(12, 3, {0, 1, 2}, sync_partition(12, 3), SlotShares{1, {6, 3, 3}});
  EXPECT_EQ(l.slots[0], (IntervalSet{{0, 4}, {7, 8}, {11, 12}}));
  EXPECT_EQ(l.slots[1], (IntervalSet{{4, 7}}));
  EXPECT_EQ(l.slots[2], (IntervalSet{{8, 11}}));
  EXPECT_EQ(l.pre_sync, (std::vector<SlotTransfer>{{0, 1, {{7, 8}}}, {0, 2, {{11, 12}}}}));
  EXPECT_EQ(l.post_sync, (std::vector<SlotTransfer>{{1, 0, {{7, 8}}}, {2, 0, {{11, 12}}}}));
}

TEST(ReplicaLayout, CoreAndExtraReceiversShareTheTailsInOrder) {
  // U = 20, K = 2 (S = [0,10) [10,20)), k = 3 with shares 12, 2, 6: core 0
  // takes 2 of S_1's tail, the extra slot the remaining 6.
  const ReplicaLayout l =
      replica_layout(20, 3, {0, 1, 2}, sync_partition(20, 2), SlotShares{1, {12, 2, 6}});
  EXPECT_EQ(l.slots[0], (IntervalSet{{0, 10}, {12, 14}}));
  EXPECT_EQ(l.slots[1], (IntervalSet{{10, 12}}));
  EXPECT_EQ(l.slots[2], (IntervalSet{{14, 20}}));
  EXPECT_EQ(l.pre_sync, (std::vector<SlotTransfer>{{0, 1, {{12, 14}}}, {2, 1, {{14, 20}}}}));
}

TEST(ReplicaLayout, RejectsBadSharesAndPartitions) {
  const auto S = sync_partition(10, 2);
  EXPECT_THROW(replica_layout(10, 3, {0, 1, 2}, S, SlotShares{1, {4, 3}}),
               std::invalid_argument);  // count
  EXPECT_THROW(replica_layout(10, 3, {0, 1, 2}, S, SlotShares{1, {5, 5, 0}}),
               std::invalid_argument);  // empty slot
  EXPECT_THROW(replica_layout(10, 3, {0, 1, 2}, S, SlotShares{1, {4, 3, 2}}),
               std::invalid_argument);  // sum
  EXPECT_THROW(replica_layout(10, 3, {0, 1, 2}, {{{0, 4}}, {{5, 10}}}, SlotShares{1, {4, 3, 3}}),
               std::invalid_argument);  // a gap in S
  EXPECT_THROW(replica_layout(10, 3, {0, 1, 2}, {{{0, 4}}, {{4, 9}}}, SlotShares{1, {4, 3, 3}}),
               std::invalid_argument);  // S short of U
}

TEST(ReplicaLayout, RejectsBadArguments) {
  EXPECT_THROW(replica_layout(10, 4, {0, 4}, 2), std::invalid_argument);    // slot out of range
  EXPECT_THROW(replica_layout(10, 4, {1, 1}, 2), std::invalid_argument);    // duplicate slot
  EXPECT_THROW(replica_layout(10, 4, {0, 1}, 3), std::invalid_argument);    // K > k
  EXPECT_THROW(replica_layout(2, 4, {0, 1, 2}, 3), std::invalid_argument);  // U < k
}

}  // namespace
}  // namespace ntp::layout
