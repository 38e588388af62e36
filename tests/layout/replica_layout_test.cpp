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

TEST(ReplicaLayout, RejectsBadArguments) {
  EXPECT_THROW(replica_layout(10, 4, {0, 4}, 2), std::invalid_argument);    // slot out of range
  EXPECT_THROW(replica_layout(10, 4, {1, 1}, 2), std::invalid_argument);    // duplicate slot
  EXPECT_THROW(replica_layout(10, 4, {0, 1}, 3), std::invalid_argument);    // K > k
  EXPECT_THROW(replica_layout(2, 4, {0, 1, 2}, 3), std::invalid_argument);  // U < k
}

}  // namespace
}  // namespace ntp::layout
