// Slow ranks from the commit record: a rank at half speed is found after
// elastic.slow_steps steps and its replica gets speed-weighted shares; a
// replica laid out for its speeds is left alone; a speed that comes back is
// laid out back; noise and small differences never re-lay out.
#include "train/slow_ranks.h"

#include <algorithm>
#include <functional>
#include <map>

#include <gtest/gtest.h>

#include "tests/model/model_test_util.h"

namespace ntp::train {
namespace {

JobPlan plan_of(std::int64_t dp, std::int64_t tp, layout::SlotSpeeds speeds = {}) {
  Config c;
  c.parallel.dp = dp;
  c.parallel.tp = tp;
  c.parallel.align = 1;
  c.parallel.speeds = std::move(speeds);
  c.train.global_batch = 8;
  return JobPlan::build(c, {model::testing::small_test_config(), 8, 100});
}

// Busy seconds of every member when slot s of replica r truly runs at
// speed(r, s): its work over its speed, plus `overhead` x the mean work (the
// replicated tensors' compute, which no layout shares out).
std::vector<double> busy_of(const JobPlan& plan, const std::function<double(int, int)>& speed, double overhead = 0) {
  double mean = 0;
  for (int r : plan.members()) mean += plan.work_of(r) / static_cast<double>(plan.members().size());
  std::vector<double> busy;
  for (int r : plan.members()) {
    const RankPlace p = plan.place(r);
    busy.push_back((plan.work_of(r) + overhead * mean) / speed(p.replica, p.slot));
  }
  return busy;
}

std::function<double(int, int)> half_speed(int replica, int slot) {
  return [=](int r, int s) { return r == replica && s == slot ? 0.5 : 1.0; };
}

const std::function<double(int, int)> kHealthy = [](int, int) { return 1.0; };

// A detector past its warm-up step (an epoch's first, never measured: fed
// here with a wildly slow rank to show it is ignored).
SlowRanks started(const JobPlan& plan, SlowRankOptions options) {
  SlowRanks slow(options);
  std::vector<double> busy(plan.members().size(), 1.0);
  busy[0] = 100.0;
  EXPECT_FALSE(slow.observe(plan, busy));
  return slow;
}

TEST(SlowRanks, AHealthyJobIsNeverLaidOutAgain) {
  const JobPlan plan = plan_of(2, 4);
  SlowRanks slow = started(plan, {0.2, 3});
  for (int step = 0; step < 20; ++step) EXPECT_FALSE(slow.observe(plan, busy_of(plan, kHealthy, 0.05)));
}

TEST(SlowRanks, ARankAtHalfSpeedIsFoundAfterSlowStepsAndGetsHalfTheUnits) {
  const JobPlan plan = plan_of(2, 4);
  SlowRanks slow = started(plan, {0.2, 3});
  EXPECT_FALSE(slow.observe(plan, busy_of(plan, half_speed(1, 2))));
  EXPECT_FALSE(slow.observe(plan, busy_of(plan, half_speed(1, 2))));
  const std::optional<Relayout> due = slow.observe(plan, busy_of(plan, half_speed(1, 2)));
  ASSERT_TRUE(due);
  EXPECT_EQ(due->speeds, (layout::SlotSpeeds{{1, {1.0, 1.0, 0.5, 1.0}}}));
  ASSERT_EQ(due->changes.size(), 1u);
  EXPECT_EQ(due->changes[0].rank, 6);
  EXPECT_EQ(due->changes[0].replica, 1);
  EXPECT_EQ(due->changes[0].slot, 2);
  EXPECT_DOUBLE_EQ(due->changes[0].assumed, 1.0);
  EXPECT_DOUBLE_EQ(due->changes[0].measured, 0.5);
  // The next plan gives that slot about half the units of its peers.
  ParallelConfig weighted = plan.parallel();
  weighted.speeds = due->speeds;
  const JobPlan next = plan.at(weighted, 1);
  const double slow_work = next.work_of(6);
  const double peer_work = next.work_of(5);
  EXPECT_NEAR(slow_work / peer_work, 0.5, 0.1);
}

TEST(SlowRanks, AReplicaLaidOutForItsSpeedsIsLeftAloneEvenWithReplicatedCompute) {
  const JobPlan plan = plan_of(2, 4, {{1, {1.0, 1.0, 0.5, 1.0}}});
  SlowRanks slow = started(plan, {0.2, 3});
  for (int step = 0; step < 20; ++step) {
    EXPECT_FALSE(slow.observe(plan, busy_of(plan, half_speed(1, 2), 0.05))) << "step " << step;
  }
}

TEST(SlowRanks, ASpeedThatComesBackIsLaidOutBack) {
  const JobPlan plan = plan_of(2, 4, {{1, {1.0, 1.0, 0.5, 1.0}}});
  SlowRanks slow = started(plan, {0.2, 2});
  EXPECT_FALSE(slow.observe(plan, busy_of(plan, kHealthy)));
  const std::optional<Relayout> due = slow.observe(plan, busy_of(plan, kHealthy));
  ASSERT_TRUE(due);
  EXPECT_TRUE(due->speeds.empty()) << "replica 1 back to equal speeds: no entry";
  ASSERT_EQ(due->changes.size(), 1u);
  EXPECT_EQ(due->changes[0].rank, 6);
  EXPECT_DOUBLE_EQ(due->changes[0].assumed, 0.5);
  EXPECT_DOUBLE_EQ(due->changes[0].measured, 1.0);
}

TEST(SlowRanks, OnlyConsecutiveStepsCount) {
  const JobPlan plan = plan_of(1, 4);
  SlowRanks slow = started(plan, {0.2, 3});
  for (int step = 0; step < 12; ++step) {
    const auto busy = busy_of(plan, step % 3 == 2 ? kHealthy : half_speed(0, 1));
    EXPECT_FALSE(slow.observe(plan, busy)) << "step " << step;
  }
}

TEST(SlowRanks, ASpeedWithinTheThresholdIsNotSlow) {
  const JobPlan plan = plan_of(1, 4);
  SlowRanks within = started(plan, {0.2, 1});
  const auto at = [](double v) { return [v](int, int s) { return s == 3 ? v : 1.0; }; };
  EXPECT_FALSE(within.observe(plan, busy_of(plan, at(0.85))));
  const std::optional<Relayout> beyond = within.observe(plan, busy_of(plan, at(0.75)));
  ASSERT_TRUE(beyond);
  EXPECT_DOUBLE_EQ(beyond->speeds.at(0)[3], 0.75);
}

TEST(SlowRanks, SpeedsAreTheMeanOfTheOffStepsRounded) {
  const JobPlan plan = plan_of(1, 2);
  SlowRanks slow = started(plan, {0.2, 2});
  const auto at = [](double v) { return [v](int, int s) { return s == 0 ? v : 1.0; }; };
  EXPECT_FALSE(slow.observe(plan, busy_of(plan, at(0.31))));
  const std::optional<Relayout> due = slow.observe(plan, busy_of(plan, at(0.37)));
  ASSERT_TRUE(due);
  EXPECT_DOUBLE_EQ(due->speeds.at(0)[0], 0.35);  // (0.31 + 0.37) / 2 = 0.34 -> 0.35
}

TEST(SlowRanks, AReplicaOfOneOrANewEpochStartsOver) {
  const JobPlan single = plan_of(2, 1);
  SlowRanks slow = started(single, {0.2, 1});
  EXPECT_FALSE(slow.observe(single, {1.0, 5.0})) << "one slot per replica: no peer to be slower than";
  const JobPlan plan = plan_of(1, 4);
  SlowRanks counting = started(plan, {0.2, 2});
  EXPECT_FALSE(counting.observe(plan, busy_of(plan, half_speed(0, 0))));
  counting.reset();
  EXPECT_FALSE(counting.observe(plan, busy_of(plan, half_speed(0, 0)))) << "an epoch's first step is not measured";
  EXPECT_FALSE(counting.observe(plan, busy_of(plan, half_speed(0, 0)))) << "reset forgot the step before it";
  EXPECT_TRUE(counting.observe(plan, busy_of(plan, half_speed(0, 0))));
}

TEST(SlowRanks, RejectsABusyListThatIsNotTheMembers) {
  const JobPlan plan = plan_of(1, 4);
  SlowRanks slow = started(plan, {0.2, 1});
  EXPECT_THROW(slow.observe(plan, {1.0, 1.0}), std::invalid_argument);
}

// The job as a loop: each step's busy times from the true speeds, a relayout
// whenever one is due. Returns the relayouts and the last plan.
std::pair<int, JobPlan> run_job(JobPlan plan, const std::function<double(int, int)>& speed, double overhead,
                                int steps) {
  SlowRanks slow(SlowRankOptions{0.2, 2});
  int relayouts = 0;
  for (int step = 0; step < steps; ++step) {
    if (const std::optional<Relayout> due = slow.observe(plan, busy_of(plan, speed, overhead))) {
      ParallelConfig next = plan.parallel();
      next.speeds = due->speeds;
      plan = plan.at(next, plan.epoch() + 1);
      slow.reset();
      ++relayouts;
    }
  }
  return {relayouts, plan};
}

// Compute that no layout shares out (here 5 % of a slot's work, a model of
// real size) makes a slot with few units look a little slow per FLOP; the
// threshold keeps that from cutting its share again: one relayout, then
// quiet; and one back once the speed returns.
TEST(SlowRanks, RelayoutsSettleAtEqualBusyTimesDespiteReplicatedCompute) {
  const auto slot3_half = [](int, int s) { return s == 3 ? 0.5 : 1.0; };
  const auto [relayouts, plan] = run_job(plan_of(1, 4), slot3_half, 0.05, 40);
  EXPECT_GE(relayouts, 1);
  EXPECT_EQ(relayouts, 1) << "the relayouts did not settle";
  const std::vector<double> busy = busy_of(plan, slot3_half, 0.05);
  const double spread = *std::max_element(busy.begin(), busy.end()) / *std::min_element(busy.begin(), busy.end());
  EXPECT_LT(spread, 1.25) << "busy times not balanced; speeds " << layout::slot_speeds_text(plan.parallel().speeds);
  // And back: the same job with its speed returned ends at equal speeds.
  const auto [back, healthy] = run_job(plan, kHealthy, 0.05, 40);
  EXPECT_EQ(back, 1);
  EXPECT_TRUE(healthy.parallel().speeds.empty()) << layout::slot_speeds_text(healthy.parallel().speeds);
}

}  // namespace
}  // namespace ntp::train
