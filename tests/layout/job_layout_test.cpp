// Worked examples of job layouts, the per-rank view and config validation.
#include "layout/job_layout.h"

#include <gtest/gtest.h>

#include "layout/errors.h"
#include "layout/sync_partition.h"

namespace ntp::layout {
namespace {

std::string error_of(const JobConfig& config) {
  try {
    plan_job(config);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "accepted";
}

TEST(JobLayout, DegradedReplicaSetsTheSyncDegree) {
  // Replica 1 lost slot 2: K = 3; replica 0 keeps 4 slots (one extra).
  const JobLayout job = plan_job({.units = 10, .tp = 4, .replicas = 2, .failed = {{1, {2}}}});
  EXPECT_EQ(job.sync_degree, 3);
  EXPECT_EQ(job.units_of(1, 3), (IntervalSet{{7, 10}}));
  EXPECT_TRUE(job.units_of(1, 2).empty());
  EXPECT_EQ(job.units_of(0, 3), (IntervalSet{{3, 4}, {9, 10}}));
  EXPECT_EQ(job.sync_group_members(2), (std::vector<std::pair<int, int>>{{0, 2}, {1, 3}}));
}

TEST(JobLayout, SlotViewGivesEachRankItsUnitsAndSyncTraffic) {
  const JobLayout job = plan_job({.units = 10, .tp = 4, .replicas = 2, .failed = {{1, {2}}}});
  const SlotView extra = job.slot_view(0, 3);
  EXPECT_TRUE(extra.trains);
  EXPECT_FALSE(extra.is_core());
  EXPECT_TRUE(extra.sync_units.empty());
  EXPECT_EQ(extra.pre_sync_sends.size(), 2u);
  EXPECT_TRUE(extra.pre_sync_receives.empty());
  const SlotView core = job.slot_view(0, 0);
  EXPECT_EQ(core.sync_group, 0);
  EXPECT_EQ(core.sync_units, (IntervalSet{{0, 4}}));
  EXPECT_EQ(core.pre_sync_receives, (std::vector<SlotTransfer>{{3, 0, {{3, 4}}}}));
  const SlotView failed = job.slot_view(1, 2);
  EXPECT_FALSE(failed.alive);
  EXPECT_FALSE(failed.trains);
  EXPECT_TRUE(failed.units.empty());
  EXPECT_THROW(job.slot_view(2, 0), std::out_of_range);
  EXPECT_THROW(job.slot_view(0, 4), std::out_of_range);
}

TEST(JobLayout, MinTpDropsSmallReplicasInsteadOfShrinkingK) {
  const JobLayout job =
      plan_job({.units = 64, .tp = 4, .replicas = 3, .failed = {{1, {0, 1}}}, .min_tp = 3});
  EXPECT_TRUE(job.replica(1).dropped);
  EXPECT_EQ(job.replica(1).active, (std::vector<int>{2, 3}));
  EXPECT_EQ(job.sync_degree, 4);
  EXPECT_EQ(job.sync_group_members(0), (std::vector<std::pair<int, int>>{{0, 0}, {2, 0}}));
  const SlotView idle = job.slot_view(1, 2);
  EXPECT_TRUE(idle.alive);
  EXPECT_FALSE(idle.trains);
}

TEST(JobLayout, UnitsNeedNotDivideEitherDegree) {
  // TP 71 of 72 with the GPT-2 vocabulary: no divisibility needed.
  const JobLayout job = plan_job({.units = 50257, .tp = 72, .replicas = 2, .failed = {{0, {5}}}});
  EXPECT_EQ(job.sync_degree, 71);
  EXPECT_EQ(job.units_of(0, 0).size(), 50257 / 71 + 1);
  EXPECT_EQ(job.units_of(1, 71).size(), 50257 / 72);
}

TEST(JobLayout, BadConfigsNameTheField) {
  EXPECT_EQ(error_of({.units = 0, .tp = 4, .replicas = 1}), "units must be >= 1, got 0");
  EXPECT_EQ(error_of({.units = 8, .tp = 0, .replicas = 1}), "tp must be >= 1, got 0");
  EXPECT_EQ(error_of({.units = 8, .tp = 4, .replicas = 0}), "replicas must be >= 1, got 0");
  EXPECT_EQ(error_of({.units = 8, .tp = 4, .replicas = 1, .min_tp = 5}),
            "min_tp (5) exceeds tp (4)");
  EXPECT_EQ(error_of({.units = 8, .tp = 4, .replicas = 1, .failed = {{1, {0}}}}),
            "failed replica 1 out of range [0, 1)");
  EXPECT_EQ(error_of({.units = 8, .tp = 4, .replicas = 1, .failed = {{0, {4}}}}),
            "failed slot 4 of replica 0 out of range [0, 4)");
  EXPECT_EQ(error_of({.units = 8, .tp = 4, .replicas = 1, .failed = {{0, {1, 1}}}}),
            "duplicate failed slot 1 of replica 0");
  EXPECT_EQ(error_of({.units = 3, .tp = 4, .replicas = 2, .failed = {{0, {1}}}}),
            "units (3) smaller than the 4 active slots of replica 1");
  EXPECT_THROW(plan_job({.units = 8, .tp = 4, .replicas = 1, .failed = {{0, {0, 1, 2, 3}}}}),
               InfeasibleError);
  EXPECT_THROW(plan_job({.units = 8, .tp = 4, .replicas = 1, .failed = {{0, {0}}}, .min_tp = 4}),
               InfeasibleError);
}

TEST(JobLayout, NeuronLikeKindsInAlignedBlocksAndSpeedWeightedReplicas) {
  // 3,072 neurons in blocks of 64; replica 1 lost slot 3 (K = 3); replica 0
  // runs slot 2 at half speed.
  const JobLayout job = plan_job({.units = 3072,
                                  .tp = 4,
                                  .replicas = 3,
                                  .failed = {{1, {3}}},
                                  .align = 64,
                                  .speeds = {{0, {1, 1, 0.5, 1}}}});
  EXPECT_EQ(job.block, 64);
  EXPECT_EQ(job.sync_partition, sync_partition(3072, 3, 64));
  EXPECT_EQ(job.units_of(1, 2), (IntervalSet{{2048, 3072}}));  // k == K: S itself
  // 48 blocks at speeds 1, 1, 0.5, 1: 14, 14, 7, 13 (times 14, 14, 14, 13).
  EXPECT_EQ(job.units_of(0, 0).size(), 896);
  EXPECT_EQ(job.units_of(0, 2).size(), 448);
  EXPECT_EQ(job.units_of(0, 3).size(), 832);
  EXPECT_EQ(job.units_of(2, 3).size(), 768);    // replica 2 at equal speeds: 12 blocks each
  EXPECT_NE(job.replicas[0], job.replicas[2]);  // same slots, other speeds: planned apart
}

TEST(JobLayout, AlignAndSpeedsAreValidated) {
  EXPECT_EQ(error_of({.units = 8, .tp = 4, .replicas = 1, .align = 0}),
            "align must be >= 1, got 0");
  EXPECT_EQ(error_of({.units = 8, .tp = 2, .replicas = 1, .speeds = {{0, {1}}}}),
            "1 speeds for replica 0, expected one per slot (2)");
  EXPECT_EQ(error_of({.units = 8, .tp = 2, .replicas = 1, .speeds = {{1, {1, 1}}}}),
            "speeds of replica 1 out of range [0, 1)");
  EXPECT_NE(error_of({.units = 8, .tp = 2, .replicas = 1, .speeds = {{0, {1, -2}}}})
                .find("finite and > 0"),
            std::string::npos);
}

}  // namespace
}  // namespace ntp::layout
