// The recovery planner (elastic/recovery_plan.h) on made-up agreements: each
// case states what a recovery must decide, and every plan passes the
// invariant checker; the checker is shown to reject plans of broken planners
// (resume one step early, a unit taken from a stale holder, ...).
#include "elastic/recovery_plan.h"

#include <map>
#include <memory>

#include <iostream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "layout/errors.h"

namespace ntp::elastic {
namespace {

using train::ParallelConfig;

ParallelConfig job(std::int64_t dp, std::int64_t tp, std::map<std::int64_t, std::vector<std::int64_t>> failed = {},
                   std::int64_t min_tp = 1) {
  ParallelConfig p;
  p.dp = dp;
  p.tp = tp;
  p.failed = train::failed_in_stage0(failed);
  p.min_tp = min_tp;
  return p;
}

// A recovery's input: the job's first configuration fixes the ranks; epochs
// 0.. hold the agreed configurations; the newest one is `last`.
struct Case {
  std::map<std::uint64_t, ParallelConfig> epochs;
  model::GptConfig gpt = model::preset("small");
  Membership agreed;
  bool failure = true;
  std::optional<layout::SlotSpeeds> speeds;  // a relayout's

  explicit Case(ParallelConfig first) { epochs[0] = std::move(first); }
  // The plan of every epoch (the first one's fixes the ranks).
  std::shared_ptr<std::map<std::uint64_t, train::JobPlan>> plans() const {
    train::Config config;
    config.parallel = epochs.at(0);
    const train::JobPlan first = train::JobPlan::build(config, {gpt, 64, 1 << 20});
    auto out = std::make_shared<std::map<std::uint64_t, train::JobPlan>>();
    for (const auto& [e, p] : epochs) out->emplace(e, first.at(p, e));
    return out;
  }
  // Every member of the newest epoch but `lost` survives, having applied
  // `applied` in the newest epoch's layout.
  Case& survive(std::int64_t applied, std::vector<int> lost = {}) {
    const auto all = plans();
    for (int r : all->rbegin()->second.members()) {
      if (std::find(lost.begin(), lost.end(), r) != lost.end()) continue;
      agreed.survivors.push_back({r, applied, epochs.rbegin()->first, -1, 1.5, false});
    }
    agreed.lost = std::move(lost);
    return *this;
  }
  Survivor& survivor(int rank) {
    for (Survivor& s : agreed.survivors) {
      if (s.rank == rank) return s;
    }
    throw std::logic_error("no survivor " + std::to_string(rank));
  }
  Case& behind(int rank, std::int64_t applied, std::int64_t pending = -1) {
    survivor(rank).applied = applied;
    survivor(rank).pending = pending;
    return *this;
  }
  Case& joins(int rank) {
    agreed.survivors.push_back({rank, -1, 0, -1, 0, false});
    std::sort(agreed.survivors.begin(), agreed.survivors.end(),
              [](const Survivor& a, const Survivor& b) { return a.rank < b.rank; });
    agreed.joined.push_back(rank);
    return *this;
  }
  RecoveryInput input() const {
    const auto all = plans();
    Membership m = agreed;
    m.epoch = all->rbegin()->first + 1;
    return {m, all->rbegin()->second, [all](std::uint64_t e) -> const train::JobPlan& { return all->at(e); }, failure,
            speeds};
  }
};

// dp x pp x tp: replica r's stage s holds ranks (r * pp + s) * tp + slot.
ParallelConfig staged(std::int64_t dp, std::int64_t pp, std::int64_t tp) {
  ParallelConfig p = job(dp, tp);
  p.pp = pp;
  return p;
}

// Plans the case and checks the invariants; the plan is returned for the case's own expectations.
RecoveryPlan planned(const Case& c) {
  const RecoveryInput in = c.input();
  RecoveryPlan plan = plan_recovery(in);
  EXPECT_EQ(check_recovery_plan(in, plan), "");
  return plan;
}

std::int64_t moved_units(const RecoveryPlan& plan) {
  const train::KindPlans& k = plan.source->stages[0];
  return k.heads.intra_units + k.heads.cross_units + k.neurons.intra_units + k.neurons.cross_units +
         k.vocab.intra_units + k.vocab.cross_units;
}

TEST(RecoveryPlan, OneLostRankResumesAfterTheNewestStepWithoutItsSlot) {
  Case c(job(2, 4));
  c.survive(9, {5});
  const RecoveryPlan plan = planned(c);
  EXPECT_EQ(plan.resume(), 10);
  EXPECT_EQ(plan.next->parallel(), job(2, 4, {{1, {1}}}));
  EXPECT_TRUE(plan.stale.empty());
  EXPECT_TRUE(plan.completes_commit.empty());
  EXPECT_EQ(plan.members, (std::vector<int>{0, 1, 2, 3, 4, 6, 7}));
  EXPECT_EQ(plan.writer, 0);
  EXPECT_TRUE(plan.refreshes.empty());
  EXPECT_FALSE(plan.changes_nothing);
  EXPECT_GT(moved_units(plan), 0);
}

// What moves when K changes (dp 2 x tp 4, rank 5 = replica 1 slot 1 lost;
// the figures are printed for docs/train.md): across domains, exactly the
// lost slot's units, each once, from the peer replica into the survivors of
// the replica that lost it; inside each domain, the units the new sync
// partition (K 4 -> 3) shifts between slots — the healthy replica is laid
// out anew too, since its core slot j holds the j-th of K parts.
TEST(RecoveryPlan, ALossMovesTheLostSlotsUnitsAcrossDomainsOnceAndTheRestInside) {
  Case c(job(2, 4));
  c.survive(9, {5});
  const RecoveryPlan plan = planned(c);
  const auto plans = c.plans();
  const train::JobPlan& before = plans->rbegin()->second;
  const train::KindPlans& k = plan.source->stages[0];
  const model::UnitKind kinds[] = {model::UnitKind::kHead, model::UnitKind::kNeuron, model::UnitKind::kVocab};
  int i = 0;
  for (const layout::TransitionPlan* kind : {&k.heads, &k.neurons, &k.vocab}) {
    const layout::IntervalSet lost = before.view(5).shard.of(kinds[i++]);
    std::map<std::string, std::int64_t> in;
    layout::IntervalSet crossed;
    for (const layout::Move& m : kind->moves) {
      in[fmt::format("r{}s{} <- r{}s{}{}", m.to.replica, m.to.slot, m.from.replica, m.from.slot,
                     m.cross_domain ? " (across)" : "")] += m.units.size();
      EXPECT_EQ(m.cross_domain, m.from.replica != m.to.replica);
      if (!m.cross_domain) continue;
      EXPECT_EQ(m.to.replica, 1) << "a unit crossed into the healthy replica";
      EXPECT_TRUE(crossed.intersect(m.units).empty()) << "a unit crossed twice";
      crossed = crossed.unite(m.units);
    }
    EXPECT_EQ(crossed, lost) << "across domains, other units than the lost slot's moved";
    EXPECT_EQ(kind->cross_units, lost.size());
    std::cout << "intra " << kind->intra_units << ", across " << kind->cross_units << "\n";
    for (const auto& [what, n] : in) std::cout << "  " << what << ": " << n << "\n";
  }
}

TEST(RecoveryPlan, TheLostWritersLogsGoToTheFirstRankThatHoldsTheStep) {
  Case c(job(2, 4));
  c.survive(3, {0});
  EXPECT_EQ(planned(c).writer, 1);
}

TEST(RecoveryPlan, TheWriterHoldsTheNewestStepsFigures) {
  Case c(job(2, 4));
  c.survive(6, {7}).behind(0, 5).behind(1, 5);
  const RecoveryPlan plan = planned(c);
  EXPECT_EQ(plan.writer, 2);
  EXPECT_EQ(plan.stale, (std::vector<int>{0, 1}));
}

TEST(RecoveryPlan, ARankThatEnteredTheCommitCompletesItLocally) {
  Case c(job(2, 4));
  c.survive(9, {5}).behind(2, 8, 9);
  const RecoveryPlan plan = planned(c);
  EXPECT_EQ(plan.completes_commit, std::vector<int>{2});
  EXPECT_TRUE(plan.stale.empty());
  EXPECT_EQ(plan.resume(), 10);
}

TEST(RecoveryPlan, ARankBehindWithoutTheCommitIsStaleAndRefilled) {
  Case c(job(2, 4));
  c.survive(9, {5}).behind(2, 8);
  const RecoveryPlan plan = planned(c);
  EXPECT_EQ(plan.stale, std::vector<int>{2});
  EXPECT_TRUE(plan.completes_commit.empty());
  // It receives every unit it holds next, even those it held: its copy is a step old.
  layout::IntervalSet received;
  for (const layout::Move& m : plan.source->stages[0].heads.receives_of({0, 2})) received.add(m.units);
  EXPECT_FALSE(received.empty());
}

TEST(RecoveryPlan, ARankTwoStepsBehindIsStaleEvenIfItEnteredACommit) {
  Case c(job(2, 4));
  c.survive(9, {5}).behind(2, 7, 8);
  EXPECT_EQ(planned(c).stale, std::vector<int>{2});
}

TEST(RecoveryPlan, RanksBehindInBothReplicasAreEachRefilledFromTheOther) {
  Case c(job(2, 4));
  c.survive(9, {7}).behind(1, 8).behind(4, 8);
  const RecoveryPlan plan = planned(c);
  EXPECT_EQ(plan.stale, (std::vector<int>{1, 4}));
}

TEST(RecoveryPlan, AReplicaWhollyBehindIsFedAcrossDomains) {
  Case c(job(2, 4));
  c.survive(9).behind(0, 8).behind(1, 8).behind(2, 8).behind(3, 8);
  const RecoveryPlan plan = planned(c);
  ASSERT_TRUE(plan.source.has_value());
  EXPECT_EQ(plan.stale, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(plan.source->stages[0].heads.intra_units, 0);
  EXPECT_EQ(plan.writer, 4);
  // Round robin over replica 1's fresh ranks: no sender queues four messages.
  EXPECT_EQ(plan.refreshes, (std::vector<std::pair<int, int>>{{4, 0}, {5, 1}, {6, 2}, {7, 3}}));
}

TEST(RecoveryPlan, NoHolderLeftForAUnitStopsTheJob) {
  Case c(job(2, 4));
  c.survive(9, {1, 5});
  const RecoveryPlan plan = planned(c);
  EXPECT_FALSE(plan.source.has_value());
  ASSERT_TRUE(plan.units_lost);
  EXPECT_THROW(std::rethrow_exception(plan.units_lost), layout::UnitsLostError);
}

TEST(RecoveryPlan, AStaleRankIsNoHolder) {
  // Replica 1 lost slot 1; replica 0's slot 1 is behind: nobody holds slot 1's units at step 9.
  Case c(job(2, 4));
  c.survive(9, {5}).behind(1, 8);
  const RecoveryPlan plan = planned(c);
  EXPECT_FALSE(plan.source.has_value());
}

TEST(RecoveryPlan, AReplicaBelowMinTpSitsOutAndItsRanksLeave) {
  Case c(job(2, 4, {}, 4));
  c.survive(9, {5});
  const RecoveryPlan plan = planned(c);
  EXPECT_EQ(plan.members, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(plan.next->parallel(), job(2, 4, {{1, {1}}}, 4));
  EXPECT_EQ(moved_units(plan), 0) << "the replica that trains keeps its layout; the dropped one needs nothing";
}

TEST(RecoveryPlan, TheLastReplicaBelowMinTpLeavesNobodyToTrain) {
  Case c(job(1, 4, {}, 4));
  c.survive(9, {2});
  try {
    plan_recovery(c.input());
    FAIL() << "planned a job in which no replica trains";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("min_tp"), std::string::npos) << e.what();
  }
}

TEST(RecoveryPlan, ASecondFailureAddsToTheFirst) {
  Case c(job(2, 4));
  c.epochs[1] = job(2, 4, {{1, {1}}});
  c.survive(12, {6});
  const RecoveryPlan plan = planned(c);
  EXPECT_EQ(plan.next->parallel(), job(2, 4, {{1, {1, 2}}}));
  EXPECT_EQ(plan.from_epoch, 1u);
  EXPECT_EQ(plan.members, (std::vector<int>{0, 1, 2, 3, 4, 7}));
}

TEST(RecoveryPlan, TwoFailuresAtOnceInDifferentReplicas) {
  Case c(job(3, 4));
  c.survive(4, {2, 9});
  const RecoveryPlan plan = planned(c);
  EXPECT_EQ(plan.next->parallel(), job(3, 4, {{0, {2}}, {2, {1}}}));
  EXPECT_TRUE(plan.source.has_value());
}

TEST(RecoveryPlan, ARejoiningRankIsRefilledWhole) {
  Case c(job(2, 4));
  c.epochs[1] = job(2, 4, {{1, {1}}});
  c.survive(20).joins(5);
  const RecoveryPlan plan = planned(c);
  EXPECT_EQ(plan.next->parallel(), job(2, 4));
  EXPECT_EQ(plan.stale, std::vector<int>{5});
  EXPECT_EQ(plan.members, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_FALSE(plan.changes_nothing);
  EXPECT_EQ(plan.resume(), 21);
}

TEST(RecoveryPlan, ARejoinAndALossTogether) {
  Case c(job(2, 4));
  c.epochs[1] = job(2, 4, {{1, {1}}});
  c.survive(20, {2}).joins(5);
  const RecoveryPlan plan = planned(c);
  EXPECT_EQ(plan.next->parallel(), job(2, 4, {{0, {2}}}));
  EXPECT_EQ(plan.stale, std::vector<int>{5});
}

TEST(RecoveryPlan, AFailureThatChangesNothingIsNotRecoveredFrom) {
  Case c(job(2, 4));
  c.survive(9);
  EXPECT_TRUE(planned(c).changes_nothing);
}

TEST(RecoveryPlan, GrowingForARankLostWhileItAskedIsNoError) {
  Case c(job(2, 4));
  c.survive(9);
  c.failure = false;
  EXPECT_FALSE(planned(c).changes_nothing);
}

// A slow slot (train/slow_ranks.h): nobody lost, the next epoch laid out
// with its speed; only units whose holder changes move, all inside the slow
// replica; the other replica moves nothing.
TEST(RecoveryPlan, ARelayoutMovesUnitsOnlyInsideTheSlowReplica) {
  Case c(job(2, 4));
  c.survive(9);
  c.failure = false;
  c.speeds = layout::SlotSpeeds{{0, {1.0, 1.0, 1.0, 0.5}}};
  const RecoveryPlan plan = planned(c);
  EXPECT_FALSE(plan.changes_nothing);
  EXPECT_EQ(plan.resume(), 10);
  EXPECT_EQ(plan.next->parallel().speeds, *c.speeds);
  EXPECT_EQ(plan.members, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_TRUE(plan.stale.empty());
  EXPECT_GT(moved_units(plan), 0);
  const train::KindPlans& k = plan.source->stages[0];
  for (const layout::TransitionPlan* kind : {&k.heads, &k.neurons, &k.vocab}) {
    EXPECT_EQ(kind->cross_units, 0);
    for (const layout::Move& m : kind->moves) {
      EXPECT_EQ(m.from.replica, 0);
      EXPECT_EQ(m.to.replica, 0);
    }
  }
  // Laid out back: the same moves in reverse, equal speeds again.
  Case back(job(2, 4));
  back.epochs[1] = plan.next->parallel();
  back.survive(12);
  back.failure = false;
  back.speeds = layout::SlotSpeeds{};
  const RecoveryPlan undone = planned(back);
  EXPECT_TRUE(undone.next->parallel().speeds.empty());
  EXPECT_EQ(moved_units(undone), moved_units(plan));
}

// A rank that failed inside the commit of the step a relayout follows
// recovers into the relayout's epoch, at its speeds.
TEST(RecoveryPlan, ARankShortOfTheCommitJoinsTheRelayoutsEpoch) {
  Case c(job(2, 4));
  c.survive(9).behind(6, 8, 9);
  c.speeds = layout::SlotSpeeds{{1, {1.0, 0.5, 1.0, 1.0}}};
  const RecoveryPlan plan = planned(c);
  EXPECT_EQ(plan.completes_commit, (std::vector<int>{6}));
  EXPECT_EQ(plan.next->parallel().speeds, *c.speeds);
  EXPECT_FALSE(plan.changes_nothing);
}

TEST(RecoveryPlan, AFailureInsideTheCommitChangesSomething) {
  Case c(job(2, 4));
  c.survive(9).behind(3, 8, 9);
  const RecoveryPlan plan = planned(c);
  EXPECT_FALSE(plan.changes_nothing);
  EXPECT_EQ(plan.completes_commit, std::vector<int>{3});
  EXPECT_EQ(moved_units(plan), 0);
}

TEST(RecoveryPlan, AFailureThatLeftARankBehindChangesSomething) {
  Case c(job(2, 4));
  c.survive(9).behind(3, 8);
  EXPECT_FALSE(planned(c).changes_nothing);
}

TEST(RecoveryPlan, TheCommitOutcomeIsTheOneSeenAtTheNewestStep) {
  Case c(job(2, 4));
  c.survive(9, {5}).behind(0, 8, 9);
  c.survivor(0).grad_norm = 7.0;  // of step 8
  c.survivor(1).grad_norm = 2.25;
  c.survivor(1).skipped = true;
  const RecoveryPlan plan = planned(c);
  EXPECT_EQ(plan.outcome.grad_norm, 2.25);
  EXPECT_TRUE(plan.outcome.skipped);
}

TEST(RecoveryPlan, AHealthyReplicasLayoutServesFromAnOlderEpochWhenItsUnitsAreTheSame) {
  // Replica 2 already runs at 3 of 4, so K stays 3 when replica 1 loses a
  // slot: replica 0 holds step 9 in epoch 1's layout, with epoch 2's units.
  Case c(job(3, 4, {{2, {3}}}));
  c.epochs[1] = job(3, 4, {{2, {3}}, {1, {0}}});
  c.survive(9, {});
  for (Survivor& s : c.agreed.survivors) s.held_epoch = s.rank < 4 ? 0 : 1;  // replica 0 missed epoch 1's move
  c.agreed.lost = {6};
  std::erase_if(c.agreed.survivors, [](const Survivor& s) { return s.rank == 6; });
  const RecoveryPlan plan = planned(c);
  EXPECT_TRUE(plan.stale.empty());
  EXPECT_EQ(plan.from_epoch, 1u);
}

TEST(RecoveryPlan, ABrokenOffMoveLeavesTheOldLayoutsHoldersStale) {
  // Epoch 1 took replica 1 to 3 slots (K 4 -> 3); replica 0's ranks 0-1 finished the move, 2-3 did not.
  Case c(job(2, 4));
  c.epochs[1] = job(2, 4, {{1, {3}}});
  c.survive(9, {});
  for (Survivor& s : c.agreed.survivors) s.held_epoch = (s.rank == 2 || s.rank == 3) ? 0 : 1;
  const RecoveryPlan plan = planned(c);
  EXPECT_EQ(plan.from_epoch, 1u);
  for (int r : plan.stale) EXPECT_TRUE(r == 2 || r == 3) << r;
}

TEST(RecoveryPlan, HoldersOfTwoEpochsWithTheSameUnitsServeTogether) {
  // Replica 1 down to one slot makes K = 1, and replica 0's layout with one
  // core slot is the contiguous one it had: ranks 0-3 (in epoch 0's layout)
  // and rank 4 (in epoch 1's) all serve.
  Case c(job(2, 4));
  c.epochs[1] = job(2, 4, {{1, {1, 2, 3}}});
  c.agreed.survivors = {{0, 9, 0, -1, 1, false}, {1, 9, 0, -1, 1, false}, {2, 9, 0, -1, 1, false},
                        {3, 9, 0, -1, 1, false}, {4, 9, 1, -1, 1, false}};
  c.failure = false;
  const RecoveryPlan plan = planned(c);
  EXPECT_EQ(plan.from_epoch, 1u);
  EXPECT_TRUE(plan.stale.empty());
}

TEST(RecoveryPlan, LlamaGroupsAndSwigluNeuronsAreRecoveredLikeHeads) {
  Case c(job(2, 2));
  c.gpt = model::preset("llama-small", model::Family::kLlama);
  c.survive(5, {3});
  const RecoveryPlan plan = planned(c);
  EXPECT_TRUE(plan.source.has_value());
  EXPECT_EQ(plan.next->parallel(), job(2, 2, {{1, {1}}}));
}

TEST(RecoveryPlan, EveryRankOfTheFirstSlotLostInANineReplicaJob) {
  Case c(job(9, 2));
  c.survive(2, {0});
  const RecoveryPlan plan = planned(c);
  EXPECT_EQ(plan.writer, 1);
  EXPECT_EQ(plan.members.size(), 17u);
}

TEST(RecoveryPlan, ALostRankAndItsReplicaPeerBehind) {
  Case c(job(2, 4));
  c.survive(9, {4}).behind(5, 8);
  const RecoveryPlan plan = planned(c);
  EXPECT_EQ(plan.stale, std::vector<int>{5});
  EXPECT_TRUE(plan.source.has_value());
}

TEST(RecoveryPlan, ThePlanIsTheSameOnEverySurvivor) {
  Case c(job(2, 4));
  c.survive(9, {5}).behind(2, 8).behind(6, 8, 9);
  const RecoveryPlan a = planned(c);
  const RecoveryPlan b = planned(c);
  EXPECT_EQ(a.stale, b.stale);
  EXPECT_EQ(a.source->stages[0].heads.moves, b.source->stages[0].heads.moves);
  EXPECT_EQ(a.writer, b.writer);
}

TEST(RecoveryPlan, NothingAppliedYetResumesAtStepZero) {
  Case c(job(2, 4));
  c.survive(-1, {6});
  const RecoveryPlan plan = planned(c);
  EXPECT_EQ(plan.resume(), 0);
}

TEST(RecoveryPlan, RunsInMicroseconds) {
  Case c(job(8, 8));
  c.survive(100, {3, 17, 42});
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i) plan_recovery(c.input());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

// ---- the checker can fail: plans of broken planners are rejected.

Case stale_case() {
  Case c(job(2, 4));
  c.survive(9, {5}).behind(2, 8);
  return c;
}

TEST(RecoveryPlanChecker, RejectsResumingOneStepEarly) {
  const Case c = stale_case();
  RecoveryPlan plan = plan_recovery(c.input());
  plan.newest -= 1;
  EXPECT_NE(check_recovery_plan(c.input(), plan).find("resumes at step 9"), std::string::npos);
}

TEST(RecoveryPlanChecker, RejectsARelayoutThatKeptTheOldSpeeds) {
  Case c(job(2, 4));
  c.survive(9);
  c.failure = false;
  c.speeds = layout::SlotSpeeds{{0, {1.0, 1.0, 1.0, 0.5}}};
  RecoveryPlan plan = plan_recovery(c.input());
  plan.next = c.input().last.at(c.input().last.next_parallel({}, {}), plan.next->epoch());
  EXPECT_NE(check_recovery_plan(c.input(), plan).find("at the asked-for speeds"), std::string::npos);
}

TEST(RecoveryPlanChecker, RejectsAUnitTakenFromAStaleHolder) {
  const Case c = stale_case();
  RecoveryPlan plan = plan_recovery(c.input());
  ASSERT_FALSE(plan.source->stages[0].heads.moves.empty());
  plan.source->stages[0].heads.moves.front().from = {0, 2};  // rank 2 is behind
  EXPECT_NE(check_recovery_plan(c.input(), plan).find("does not hold step 9"), std::string::npos);
}

TEST(RecoveryPlanChecker, RejectsAUnitTakenFromALostRank) {
  Case c(job(2, 4));
  c.survive(9, {5});
  RecoveryPlan plan = plan_recovery(c.input());
  plan.source->stages[0].neurons.moves.front().from = {1, 1};  // rank 5 is lost
  EXPECT_NE(check_recovery_plan(c.input(), plan), "");
}

TEST(RecoveryPlanChecker, RejectsARankBehindThatIsNeitherStaleNorCompleting) {
  const Case c = stale_case();
  RecoveryPlan plan = plan_recovery(c.input());
  plan.stale.clear();
  EXPECT_NE(check_recovery_plan(c.input(), plan).find("neither stale nor completing"), std::string::npos);
}

TEST(RecoveryPlanChecker, RejectsCompletingACommitTheRankDidNotEnter) {
  const Case c = stale_case();
  RecoveryPlan plan = plan_recovery(c.input());
  plan.stale.clear();
  plan.completes_commit = {2};
  plan.source->stale.clear();
  EXPECT_NE(check_recovery_plan(c.input(), plan).find("without having entered"), std::string::npos);
}

TEST(RecoveryPlanChecker, RejectsAWriterWithoutTheNewestFigures) {
  Case c(job(2, 4));
  c.survive(6, {5}).behind(0, 5);
  RecoveryPlan plan = plan_recovery(c.input());
  plan.writer = 0;
  EXPECT_NE(check_recovery_plan(c.input(), plan).find("does not hold step 6's figures"), std::string::npos);
}

TEST(RecoveryPlanChecker, RejectsANextConfigurationThatKeepsALostSlot) {
  Case c(job(2, 4));
  c.survive(9, {5});
  RecoveryPlan plan = plan_recovery(c.input());
  plan.next = c.plans()->at(0).at(job(2, 4), plan.next->epoch());
  EXPECT_NE(check_recovery_plan(c.input(), plan), "");
}

TEST(RecoveryPlanChecker, RejectsAStaleRankServingTheReplicatedTensors) {
  const Case c = stale_case();
  RecoveryPlan plan = plan_recovery(c.input());
  ASSERT_EQ(plan.refreshes, (std::vector<std::pair<int, int>>{{0, 2}}));
  EXPECT_EQ(check_recovery_plan(c.input(), plan), "");
  plan.refreshes.front().first = 2;
  EXPECT_NE(check_recovery_plan(c.input(), plan).find("serves the replicated"), std::string::npos);
  plan.refreshes.clear();
  EXPECT_NE(check_recovery_plan(c.input(), plan).find("nobody refreshes it"), std::string::npos);
  plan.refreshes = {{0, 2}, {1, 2}};
  EXPECT_NE(check_recovery_plan(c.input(), plan).find("refreshed twice"), std::string::npos);
  plan.refreshes = {{0, 2}, {1, 3}};
  EXPECT_NE(check_recovery_plan(c.input(), plan).find("rank 3 is refreshed but not stale"), std::string::npos);
  plan.refreshes = {{5, 2}};  // rank 5 is lost
  EXPECT_NE(check_recovery_plan(c.input(), plan).find("rank 5 refreshes rank 2 but does not hold step 9"),
            std::string::npos);
}

// With pipeline stages a lost rank's units come from the same stage of the
// other replica; the other stages move nothing.
TEST(RecoveryPlan, ALostRankOfAStageIsRefilledFromThatStageOnly) {
  Case c(staged(2, 2, 2));
  c.survive(9, {6});  // replica 1, stage 1, slot 0
  const RecoveryPlan plan = planned(c);
  ASSERT_TRUE(plan.source.has_value());
  ParallelConfig expected = staged(2, 2, 2);
  expected.failed[{1, 1}] = {0};
  EXPECT_EQ(plan.next->parallel(), expected);
  ASSERT_EQ(plan.source->stages.size(), 2u);
  const train::KindPlans& first = plan.source->stages[0];
  for (const layout::TransitionPlan* k : {&first.heads, &first.neurons, &first.vocab}) EXPECT_TRUE(k->moves.empty());
  const train::KindPlans& second = plan.source->stages[1];
  std::int64_t moved = 0;
  for (const layout::TransitionPlan* k : {&second.heads, &second.neurons, &second.vocab}) {
    for (const layout::Move& m : k->moves) {
      EXPECT_EQ(m.to, (layout::SlotRef{1, 1})) << "only the surviving slot of replica 1's stage 1 receives";
      moved += m.units.size();
    }
  }
  EXPECT_GT(moved, 0);
  EXPECT_EQ(plan.members, (std::vector<int>{0, 1, 2, 3, 4, 5, 7}));
}

// A move's holder is a slot of the move's own stage: slot 0 of replica 1 is
// lost in stage 1 (rank 6) though alive in stage 0 (rank 4).
TEST(RecoveryPlanChecker, RejectsUnitsTakenFromTheSameSlotOfAnotherStage) {
  Case c(staged(2, 2, 2));
  c.survive(9, {6});
  RecoveryPlan plan = plan_recovery(c.input());
  ASSERT_FALSE(plan.source->stages[1].heads.moves.empty());
  plan.source->stages[1].heads.moves.front().from = {1, 0};
  EXPECT_NE(check_recovery_plan(c.input(), plan).find("of stage 1 come from replica 1 slot 0"), std::string::npos);
  plan.source->stages.pop_back();
  EXPECT_NE(check_recovery_plan(c.input(), plan).find("the source plans 1 stages"), std::string::npos);
}

// Stale ranks are refreshed by a rank of their own stage (their replicated
// tensors are that stage's).
TEST(RecoveryPlan, StaleRanksOfTwoStagesAreRefreshedWithinTheirStage) {
  Case c(staged(2, 2, 2));
  c.survive(9).behind(2, 8).behind(4, 8);  // stage 1 of replica 0, stage 0 of replica 1
  RecoveryPlan plan = planned(c);
  EXPECT_EQ(plan.stale, (std::vector<int>{2, 4}));
  EXPECT_EQ(plan.refreshes, (std::vector<std::pair<int, int>>{{3, 2}, {0, 4}}));
  plan.refreshes = {{0, 2}, {0, 4}};
  EXPECT_NE(check_recovery_plan(c.input(), plan).find("rank 2 of stage 1 is refreshed by rank 0 of stage 0"),
            std::string::npos);
}

TEST(RecoveryPlan, AStageWithNoHolderLeftNamesTheStage) {
  Case c(staged(2, 2, 2));
  c.survive(9, {2, 6});  // slot 0 of stage 1 in both replicas
  const RecoveryPlan plan = planned(c);
  ASSERT_FALSE(plan.source.has_value());
  try {
    std::rethrow_exception(plan.units_lost);
  } catch (const layout::UnitsLostError& e) {
    EXPECT_NE(std::string(e.what()).find("of pipeline stage 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ntp::elastic
