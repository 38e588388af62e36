// Worked examples of transition plans.
#include "layout/transition.h"

#include <gtest/gtest.h>

#include <ostream>

#include "layout/errors.h"

namespace ntp::layout {

// Failed comparisons of plans read "1:1 -> 0:1 [3,6) cross", not object bytes.
// Found by argument-dependent lookup, so they live in the types' namespace;
// this is the only file of layout_tests that prints these types.
void PrintTo(const SlotRef& slot, std::ostream* os) {
  *os << slot.replica << ":" << slot.slot;
}

void PrintTo(const Move& m, std::ostream* os) {
  PrintTo(m.from, os);
  *os << " -> ";
  PrintTo(m.to, os);
  *os << " " << m.units.to_string() << (m.cross_domain ? " cross" : " intra");
}

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

// Stale slots: survivors one step behind (a failure inside the commit
// collective). In a healthy dp2 x tp4 job of 12 units, slot s holds [3s, 3s+3).

TEST(Transition, StaleSlotOfAHealthyJobIsRefilledFromThePeerReplica) {
  // Nothing failed and nothing re-lays, yet slot 1 of replica 0 missed the last
  // update: the unchanged layout does not mean "all stays" for its replica.
  const JobLayout job = plan_job({.units = 12, .tp = 4, .replicas = 2});
  const TransitionPlan plan = plan_transition(job, job, {{0, 1}});
  ASSERT_TRUE(plan.recoverable());
  EXPECT_EQ(plan.moves, (std::vector<Move>{{{1, 1}, {0, 1}, {{3, 6}}, true}}));
  EXPECT_EQ(plan.cross_units, 3);
  EXPECT_EQ(plan.intra_units, 0);
}

TEST(Transition, StaleSlotBesideADeadSlotNeitherServesNorKeeps) {
  // Replica 0 loses slot 2 and its slot 1 is stale; K drops to 3.
  // S(12, 3) = [0,4) [4,8) [8,12). Replica 0 (slots 0, 1, 3) takes S; replica 1
  // (k = 4) keeps 3 units per slot: [0,3) [4,7) [8,11), slot 3 the tails.
  const JobLayout from = plan_job({.units = 12, .tp = 4, .replicas = 2});
  const JobLayout to = plan_job({.units = 12, .tp = 4, .replicas = 2, .failed = {{0, {2}}}});
  const TransitionPlan plan = plan_transition(from, to, {{0, 1}});
  ASSERT_TRUE(plan.recoverable());
  EXPECT_EQ(plan.moves, (std::vector<Move>{
                            // [3,4) was on the stale slot 1: it crosses, not moves inside.
                            {{1, 1}, {0, 0}, {{3, 4}}, true},
                            // The stale slot receives all of [4,8), even [4,6) it held.
                            {{1, 1}, {0, 1}, {{4, 6}}, true},
                            {{1, 2}, {0, 1}, {{6, 8}}, true},
                            {{1, 2}, {0, 3}, {{8, 9}}, true},  // was on the dead slot 2
                            // Replica 1 re-lays for K = 3 inside its domain.
                            {{1, 2}, {1, 1}, {{6, 7}}, false},
                            {{1, 3}, {1, 2}, {{9, 11}}, false},
                            {{1, 1}, {1, 3}, {{3, 4}}, false},
                            {{1, 2}, {1, 3}, {{7, 8}}, false},
                        }));
  EXPECT_TRUE(plan.sends_of({0, 1}).empty());
  EXPECT_EQ(plan.cross_units, 6);
  EXPECT_EQ(plan.intra_units, 5);
}

TEST(Transition, StaleSlotTakesWhatItDidNotHoldFromItsOwnReplicaFirst) {
  // As above with slot 0 stale instead: its new piece [0,4) is [0,3), its own
  // outdated copy (from the peer), and [3,4) of the healthy slot 1 (inside).
  const JobLayout from = plan_job({.units = 12, .tp = 4, .replicas = 2});
  const JobLayout to = plan_job({.units = 12, .tp = 4, .replicas = 2, .failed = {{0, {2}}}});
  const TransitionPlan plan = plan_transition(from, to, {{0, 0}});
  ASSERT_TRUE(plan.recoverable());
  EXPECT_EQ(plan.receives_of({0, 0}), (std::vector<Move>{{{0, 1}, {0, 0}, {{3, 4}}, false},
                                                         {{1, 0}, {0, 0}, {{0, 3}}, true}}));
  // The healthy slot 1 keeps [4,6) and refills [6,8) of the dead slot.
  EXPECT_EQ(plan.receives_of({0, 1}), (std::vector<Move>{{{1, 2}, {0, 1}, {{6, 8}}, true}}));
  EXPECT_EQ(plan.cross_units, 3 + 2 + 1);
}

TEST(Transition, WholeStaleReplicaIsFedByItsPeersInTurn) {
  const JobLayout job = plan_job({.units = 12, .tp = 4, .replicas = 3});
  const TransitionPlan plan = plan_transition(job, job, {{1, 0}, {1, 1}, {1, 2}, {1, 3}});
  ASSERT_TRUE(plan.recoverable());
  // Least loaded peer first, ties to the lowest id: replicas 0 and 2 alternate.
  EXPECT_EQ(plan.moves, (std::vector<Move>{{{0, 0}, {1, 0}, {{0, 3}}, true},
                                           {{2, 1}, {1, 1}, {{3, 6}}, true},
                                           {{0, 2}, {1, 2}, {{6, 9}}, true},
                                           {{2, 3}, {1, 3}, {{9, 12}}, true}}));
  EXPECT_EQ(plan.cross_units, 12);
}

TEST(Transition, StaleSlotThatDoesNotTrainNeedsNothingAndServesNobody) {
  // Replica 2 sat out (min_tp 2) and is repaired; replica 1 loses slot 0 and
  // sits out, its surviving slot 1 stale. Unstale, slot 1 would serve [2,4)
  // (the less loaded peer); stale, replica 0 serves everything.
  const JobConfig before{.units = 4, .tp = 2, .replicas = 3, .failed = {{2, {1}}}, .min_tp = 2};
  const JobConfig after{.units = 4, .tp = 2, .replicas = 3, .failed = {{1, {0}}}, .min_tp = 2};
  const JobLayout from = plan_job(before), to = plan_job(after);
  EXPECT_EQ(plan_transition(from, to).receives_of({2, 1}),
            (std::vector<Move>{{{1, 1}, {2, 1}, {{2, 4}}, true}}));
  const TransitionPlan plan = plan_transition(from, to, {{1, 1}, {1, 0}});
  EXPECT_EQ(plan.moves, (std::vector<Move>{{{0, 0}, {2, 0}, {{0, 2}}, true},
                                           {{0, 1}, {2, 1}, {{2, 4}}, true}}));
}

TEST(Transition, StaleUnitsWithNoOtherHolderAreReportedLost) {
  // Slot 1 of both replicas is stale: nobody holds [2,4) at the last step.
  const JobLayout job = plan_job({.units = 8, .tp = 4, .replicas = 2});
  const TransitionPlan plan = plan_transition(job, job, {{0, 1}, {1, 1}});
  ASSERT_FALSE(plan.recoverable());
  EXPECT_TRUE(plan.moves.empty());
  EXPECT_EQ(plan.lost_summary(),
            "replica 0 would lose 2 units [2,4); replica 1 would lose 2 units [2,4)");
  EXPECT_THROW(plan.require_recoverable(), UnitsLostError);
}

TEST(Transition, StaleSlotOutsideTheJobIsRejected) {
  const JobLayout job = plan_job({.units = 8, .tp = 4, .replicas = 2});
  EXPECT_THROW(plan_transition(job, job, {{2, 0}}), std::invalid_argument);
  EXPECT_THROW(plan_transition(job, job, {{0, 4}}), std::invalid_argument);
  EXPECT_THROW(plan_transition(job, job, {{-1, 0}}), std::invalid_argument);
}

TEST(Transition, RejectsLayoutsOfDifferentJobs) {
  const JobLayout a = plan_job({.units = 8, .tp = 4, .replicas = 1});
  const JobLayout b = plan_job({.units = 9, .tp = 4, .replicas = 1});
  EXPECT_THROW(plan_transition(a, b), std::invalid_argument);
}

}  // namespace
}  // namespace ntp::layout
