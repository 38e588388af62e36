// Where a recovery takes the newest state from when the survivors hold it in
// different layouts (a recovery broken off by a second failure).
#include "train/recovery_source.h"

#include <gtest/gtest.h>

#include <map>

#include "layout/errors.h"
#include "tests/model/model_test_util.h"

namespace ntp::train {
namespace {

// dp 3 x tp 2. Epoch 0: healthy. Epoch 1: rank 1 (replica 0, slot 1) lost.
// Epoch 1's state move was broken off by rank 3 (replica 1, slot 1): only
// rank 5 (replica 2, slot 1), whose move was trivial, adopted epoch 1; ranks
// 0, 2 and 4 still hold step 1 in epoch 0's layout. Next: without ranks 1, 3.
class RecoverySource : public ::testing::Test {
 protected:
  static ParallelConfig config(std::map<std::int64_t, std::vector<std::int64_t>> failed) {
    ParallelConfig p;
    p.dp = 3;
    p.tp = 2;
    p.failed = failed_in_stage0(failed);
    return p;
  }
  static SurvivorState at(int replica, int slot, std::uint64_t held_epoch, std::int64_t applied = 1) {
    return {{replica, slot}, applied, -1, held_epoch};
  }
  static JobPlan first() {
    Config c;
    c.parallel = config({});
    c.train.global_batch = 4;
    return JobPlan::build(c, {model::testing::small_test_config(), 8, 100});
  }
  const JobPlan first_ = first();
  const JobPlan second_ = first_.at(config({{0, {1}}}), 1);
  const std::map<std::uint64_t, const JobPlan*> plans_ = {{0, &first_}, {1, &second_}};
  const JobPlan next_ = first_.at(config({{0, {1}}, {1, {1}}}), 2);
};

TEST_F(RecoverySource, ASurvivorInAnotherLayoutServesWhereItHoldsTheSameUnits) {
  const std::vector<SurvivorState> survivors = {at(0, 0, 0), at(1, 0, 0), at(2, 0, 0), at(2, 1, 1)};
  // Taking only the survivors of the newest layout loses units: rank 5 alone
  // holds epoch 1's layout, and ranks 0, 2, 4 would all be stale.
  EXPECT_THROW(transition(second_, next_, {{0, 0}, {1, 0}, {2, 0}}), layout::UnitsLostError);
  const train::RecoverySource source = choose_recovery_source(plans_, survivors, next_);
  EXPECT_EQ(source.epoch, 1u);
  // Replica 0 went to TP 1 in epoch 1, so rank 0's epoch-0 units are not its
  // epoch-1 ones; replicas 1 and 2 kept theirs.
  EXPECT_EQ(source.stale, (std::vector<RankPlace>{{0, 0}}));
  EXPECT_TRUE(source.stages[0].heads.recoverable());
}

TEST_F(RecoverySource, AllInOneLayoutIsTheUsualCase) {
  const std::vector<SurvivorState> survivors = {at(0, 0, 0), at(1, 0, 0), at(2, 0, 0), at(2, 1, 0)};
  const train::RecoverySource source = choose_recovery_source(plans_, survivors, next_);
  EXPECT_EQ(source.epoch, 0u);
  EXPECT_TRUE(source.stale.empty());
}

TEST_F(RecoverySource, ASurvivorBehindIsStaleAndOneShortOfTheCommitCompletesIt) {
  std::vector<SurvivorState> survivors = {at(0, 0, 0), at(1, 0, 0, 0), at(2, 0, 0), at(2, 1, 0)};
  EXPECT_EQ(choose_recovery_source(plans_, survivors, next_).stale, (std::vector<RankPlace>{{1, 0}}));
  survivors[1].pending = 1;  // it entered step 1's commit: it completes the step itself
  EXPECT_TRUE(completes_locally(survivors[1], 1, 0));
  EXPECT_TRUE(choose_recovery_source(plans_, survivors, next_).stale.empty());
}

TEST_F(RecoverySource, WhenEveryLayoutLosesUnitsTheNewestOnesLossIsThrown) {
  // Slot 1's units: rank 5 held them and is gone; nobody else has them.
  const std::vector<SurvivorState> survivors = {at(0, 0, 0), at(1, 0, 0), at(2, 0, 1)};
  EXPECT_THROW(choose_recovery_source(plans_, survivors, first_.at(config({{0, {1}}, {1, {1}}, {2, {1}}}), 2)),
               layout::UnitsLostError);
}

}  // namespace
}  // namespace ntp::train
