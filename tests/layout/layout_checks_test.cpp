// Every property checker of layout_checks.h shown to fail: each is fed a
// deliberately broken variant of a correct layout and must reject it (and
// accept the correct one), so a property test that passes means something.
#include "layout_checks.h"

#include <gtest/gtest.h>

#include "layout/shares.h"
#include "layout/sync_partition.h"

namespace ntp::layout::testing {
namespace {

// 3072 neurons in blocks of 64 on replica slots {0, 1, 2, 3, 4} with K = 4:
// shares 640 640 640 576 576, S in blocks of 64 over 4 parts.
struct Example {
  Unit units = 3072;
  std::vector<int> active{0, 1, 2, 3, 4};
  std::vector<double> speeds = std::vector<double>(5, 1.0);
  std::vector<IntervalSet> sync = sync_partition(3072, 4, 64);
  SlotShares shares = slot_shares(3072, 64, speeds);
  ReplicaLayout layout() const { return replica_layout(units, 5, active, sync, shares); }
};

TEST(LayoutChecks, TheCorrectLayoutPasses) {
  const Example e;
  const ReplicaLayout l = e.layout();
  EXPECT_EQ(coverage_violation(l, e.units), "");
  EXPECT_EQ(sync_violation(l, e.sync), "");
  EXPECT_EQ(share_violation(l, e.units, e.speeds), "");
  EXPECT_EQ(partition_violation(e.sync, e.units, 64), "");
}

TEST(LayoutChecks, CoverageRejectsAUnitHeldTwiceOrLostOrOnAFailedSlot) {
  const Example e;
  ReplicaLayout twice = e.layout();
  twice.slots[0].add(700, 701);  // the extra slot's unit, now on slot 0 as well
  EXPECT_NE(coverage_violation(twice, e.units).find("held twice"), std::string::npos);
  ReplicaLayout lost = e.layout();
  lost.slots[1] = lost.slots[1].subtract(IntervalSet::range(800, 801));
  EXPECT_NE(coverage_violation(lost, e.units), "");
  ReplicaLayout failed = e.layout();
  failed.active = {0, 1, 2, 3};  // slot 4 failed but still holds units
  EXPECT_NE(coverage_violation(failed, e.units).find("failed slot 4"), std::string::npos);
}

TEST(LayoutChecks, SharesRejectAShareOffByOneBlockOrNotInBlocks) {
  const Example e;
  SlotShares off = e.shares;
  off.units[0] += 64;  // one block more on slot 0, one less on slot 4
  off.units[4] -= 64;
  const ReplicaLayout one_block = replica_layout(e.units, 5, e.active, e.sync, off);
  EXPECT_EQ(coverage_violation(one_block, e.units), "");  // still a valid layout...
  EXPECT_NE(share_violation(one_block, e.units, e.speeds).find("busiest"),
            std::string::npos);  // ...but slow
  SlotShares unaligned = e.shares;
  unaligned.units[1] += 1;
  unaligned.units[2] -= 1;
  EXPECT_NE(
      share_violation(replica_layout(e.units, 5, e.active, e.sync, unaligned), e.units, e.speeds)
          .find("not in blocks"),
      std::string::npos);
  // A slot at half speed must hold less: equal shares put it over the bound.
  EXPECT_NE(share_violation(e.layout(), e.units, {1.0, 1.0, 1.0, 1.0, 0.5}), "");
}

TEST(LayoutChecks, SyncRejectsAMissingTransferABadInverseOrNoPrefix) {
  const Example e;
  ReplicaLayout dropped = e.layout();
  ASSERT_FALSE(dropped.pre_sync.empty());
  dropped.pre_sync.pop_back();
  EXPECT_NE(sync_violation(dropped, e.sync), "");
  ReplicaLayout inverse = e.layout();
  inverse.post_sync.front().to = 3;
  EXPECT_NE(sync_violation(inverse, e.sync).find("post-sync"), std::string::npos);
  ReplicaLayout shifted = e.layout();
  shifted.core = {1, 2, 3, 4};
  EXPECT_NE(sync_violation(shifted, e.sync).find("first K"), std::string::npos);
  // Core slot 0 keeping the end of S_0 instead of its start.
  ReplicaLayout suffix = e.layout();
  const IntervalSet& s0 = e.sync[0];
  const Unit kept = suffix.slots[0].size();
  suffix.slots[0] = s0.suffix_after(s0.size() - kept);
  EXPECT_NE(sync_violation(suffix, e.sync).find("prefix"), std::string::npos);
}

TEST(LayoutChecks, PartitionRejectsAPartOffByABlockOrAGap) {
  std::vector<IntervalSet> off = sync_partition(3072, 4, 64);
  off[0] = IntervalSet::range(0, 768 + 128);  // two blocks more than S_3
  off[1] = IntervalSet::range(768 + 128, 1536);
  EXPECT_NE(partition_violation(off, 3072, 64).find("more than a block"), std::string::npos);
  std::vector<IntervalSet> gap = sync_partition(3072, 4, 64);
  gap[1] = IntervalSet::range(769, 1536);
  EXPECT_NE(partition_violation(gap, 3072, 64), "");
  EXPECT_NE(partition_violation(sync_partition(3000, 4, 1), 3000, 64).find("blocks"),
            std::string::npos);
}

TEST(LayoutChecks, JobRejectsLayoutsOtherThanThePlannedOnes) {
  const JobConfig config{.units = 3072, .tp = 5, .replicas = 2, .failed = {{1, {4}}}, .align = 64};
  JobLayout job = plan_job(config);
  EXPECT_EQ(job_violation(job, config), "");
  // Replica 1 (k == K) laid out with shares one block off: valid, not planned.
  SlotShares off = slot_shares(3072, job.block, std::vector<double>(4, 1.0));
  off.units[0] += job.block;
  off.units[1] -= job.block;
  job.replicas[1] = std::make_shared<const ReplicaLayout>(
      replica_layout(3072, 5, {0, 1, 2, 3}, job.sync_partition, off));
  EXPECT_NE(job_violation(job, config), "");
  JobLayout coarse = plan_job(config);
  coarse.block = 1;
  EXPECT_NE(job_violation(coarse, config).find("kind_block"), std::string::npos);
}

}  // namespace
}  // namespace ntp::layout::testing
