// Worked examples of transition plans.
#include "layout/transition.h"

#include <gtest/gtest.h>

#include "layout/errors.h"

namespace ntp::layout {
namespace {

TEST(Transition, FailureMovesInsideReplicasAndRefillsFromPeers) {
  // Three healthy replicas of 4 slots (slot s holds [3s, 3s+3)); replica 1
  // loses slot 2, K drops to 3. S(12, 3) = [0,4) [4,8) [8,12).
  const JobLayout from = plan_job({.units = 12, .tp = 4, .replicas = 3});
  const JobLayout to = plan_job({.units = 12, .tp = 4, .replicas = 3, .failed = {{1, {2}}}});
  const TransitionPlan plan = plan_transition(from, to);
  ASSERT_TRUE(plan.recoverable());
  // Replica 1 lost [6,9): slot 1 now needs [6,8) and slot 3 needs [8,9). The
  // two peers serve one piece each (least loaded, then lowest id).
  const std::vector<Move> into_1_1 = plan.receives_of({1, 1});
  ASSERT_EQ(into_1_1.size(), 1u);  // old [3,6): [4,6) stays, [3,4) went to slot 0
  EXPECT_EQ(into_1_1[0].from, (SlotRef{0, 2}));
  EXPECT_EQ(into_1_1[0].units, (IntervalSet{{6, 8}}));
  EXPECT_TRUE(into_1_1[0].cross_domain);
  const std::vector<Move> into_1_3 = plan.receives_of({1, 3});
  ASSERT_EQ(into_1_3.size(), 1u);
  EXPECT_EQ(into_1_3[0].from, (SlotRef{2, 2}));
  EXPECT_EQ(into_1_3[0].units, (IntervalSet{{8, 9}}));
  EXPECT_EQ(plan.cross_units, 3);
  // Healthy replicas re-lay for K = 3: 5 units move in each; replica 1 moves [3,4).
  EXPECT_EQ(plan.intra_units, 5 + 5 + 1);
  EXPECT_EQ(plan.sends_of({0, 3}).size(), 1u);  // [9,11) to slot 2
}

TEST(Transition, RepairRestoresTheHealthyLayout) {
  const JobLayout degraded = plan_job({.units = 12, .tp = 4, .replicas = 2, .failed = {{1, {2}}}});
  const JobLayout healthy = plan_job({.units = 12, .tp = 4, .replicas = 2});
  const TransitionPlan plan = plan_transition(degraded, healthy);
  ASSERT_TRUE(plan.recoverable());
  // The repaired slot 2 of replica 1 is fed by its own replica: [6,8) from
  // slot 1, [8,9) from slot 3. Nothing crosses domains.
  EXPECT_EQ(plan.cross_units, 0);
  const std::vector<Move> into = plan.receives_of({1, 2});
  ASSERT_EQ(into.size(), 2u);
  EXPECT_EQ(into[0].units, (IntervalSet{{6, 8}}));
  EXPECT_EQ(into[1].units, (IntervalSet{{8, 9}}));
}

TEST(Transition, ReplicaThatSatOutIsFedAcrossDomains) {
  const JobConfig base{.units = 4, .tp = 2, .replicas = 2, .failed = {{1, {1}}}, .min_tp = 2};
  JobConfig repaired = base;
  repaired.failed.clear();
  const TransitionPlan plan = plan_transition(plan_job(base), plan_job(repaired));
  EXPECT_EQ(plan.moves, (std::vector<Move>{{{0, 0}, {1, 0}, {{0, 2}}, true},
                                           {{0, 1}, {1, 1}, {{2, 4}}, true}}));
  EXPECT_EQ(plan.cross_units, 4);
  EXPECT_EQ(plan.intra_units, 0);
}

TEST(Transition, UnitsWithNoSurvivingHolderAreReportedLost) {
  const JobLayout from = plan_job({.units = 8, .tp = 4, .replicas = 1});
  const JobLayout to = plan_job({.units = 8, .tp = 4, .replicas = 1, .failed = {{0, {1}}}});
  const TransitionPlan plan = plan_transition(from, to);
  ASSERT_FALSE(plan.recoverable());
  ASSERT_EQ(plan.lost.size(), 1u);
  EXPECT_EQ(plan.lost[0].replica, 0);
  EXPECT_EQ(plan.lost[0].units, (IntervalSet{{2, 4}}));
  EXPECT_EQ(plan.lost_summary(), "replica 0 would lose 2 units [2,4)");
  EXPECT_THROW(plan.require_recoverable(), UnitsLostError);
}

TEST(Transition, RejectsLayoutsOfDifferentJobs) {
  const JobLayout a = plan_job({.units = 8, .tp = 4, .replicas = 1});
  const JobLayout b = plan_job({.units = 9, .tp = 4, .replicas = 1});
  EXPECT_THROW(plan_transition(a, b), std::invalid_argument);
}

}  // namespace
}  // namespace ntp::layout
