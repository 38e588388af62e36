#include "train/schedule.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "power/boost_policy.h"

namespace ntp::train {
namespace {

std::int64_t sum(const std::vector<std::int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), std::int64_t{0});
}

// A random job: n up to 72, up to 6 replicas, random failures, min_tp, batch.
BatchSplitInput random_input(std::mt19937_64& rng) {
  BatchSplitInput in;
  in.base_tp = std::uniform_int_distribution<std::int64_t>(1, 72)(rng);
  const auto dp = std::uniform_int_distribution<std::int64_t>(1, 6)(rng);
  in.min_tp = std::uniform_int_distribution<std::int64_t>(1, in.base_tp)(rng);
  std::int64_t training = 0;
  for (std::int64_t r = 0; r < dp; ++r) {
    const bool degraded = std::bernoulli_distribution(0.5)(rng);
    const std::int64_t k =
        degraded ? std::uniform_int_distribution<std::int64_t>(0, in.base_tp)(rng) : in.base_tp;
    in.active.push_back(k);
    training += k >= in.min_tp ? 1 : 0;
  }
  if (training == 0) in.active[0] = in.base_tp;
  training = std::max<std::int64_t>(training, 1);
  in.global_batch = std::uniform_int_distribution<std::int64_t>(training, 200)(rng);
  return in;
}

constexpr BatchPolicy kPolicies[] = {BatchPolicy::kProportional, BatchPolicy::kFixed,
                                     BatchPolicy::kConstantGlobal};

TEST(BatchShares, SumExactlyDroppedGetNothingTrainingGetSome) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    const BatchSplitInput in = random_input(rng);
    for (BatchPolicy policy : kPolicies) {
      const std::vector<std::int64_t> shares = batch_shares(policy, in);
      ASSERT_EQ(shares.size(), in.active.size());
      ASSERT_EQ(sum(shares), in.global_batch) << to_string(policy);
      for (std::size_t r = 0; r < shares.size(); ++r) {
        if (in.active[r] < in.min_tp) {
          EXPECT_EQ(shares[r], 0) << to_string(policy) << " replica " << r;
        } else {
          EXPECT_GE(shares[r], 1) << to_string(policy) << " replica " << r;
        }
      }
      EXPECT_EQ(batch_shares(policy, in), shares) << "not deterministic";
    }
  }
}

TEST(BatchShares, ProportionalIsWithinOneOfTheExactQuota) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 3000; ++trial) {
    const BatchSplitInput in = random_input(rng);
    const std::vector<std::int64_t> shares = batch_shares(BatchPolicy::kProportional, in);
    double weight_sum = 0;
    for (std::int64_t k : in.active) weight_sum += k >= in.min_tp ? static_cast<double>(k) : 0.0;
    for (std::size_t r = 0; r < shares.size(); ++r) {
      if (in.active[r] < in.min_tp) continue;
      const double quota = static_cast<double>(in.global_batch * in.active[r]) / weight_sum;
      // At most one seat off the quota, or raised to the guaranteed one sample.
      EXPECT_TRUE(std::abs(static_cast<double>(shares[r]) - quota) < 1.0 + 1e-9 || shares[r] == 1)
          << "replica " << r << " share " << shares[r] << " quota " << quota;
    }
    // More active slots never means fewer samples (ties broken by id only).
    for (std::size_t a = 0; a < shares.size(); ++a) {
      for (std::size_t b = 0; b < shares.size(); ++b) {
        if (in.active[a] > in.active[b] && in.active[b] >= in.min_tp) {
          EXPECT_GE(shares[a], shares[b]);
        }
      }
    }
  }
}

TEST(BatchShares, FixedSplitsEvenlyOverTrainingReplicas) {
  std::mt19937_64 rng(13);
  for (int trial = 0; trial < 2000; ++trial) {
    const BatchSplitInput in = random_input(rng);
    const std::vector<std::int64_t> shares = batch_shares(BatchPolicy::kFixed, in);
    std::int64_t lo = in.global_batch;
    std::int64_t hi = 0;
    for (std::size_t r = 0; r < shares.size(); ++r) {
      if (in.active[r] < in.min_tp) continue;
      lo = std::min(lo, shares[r]);
      hi = std::max(hi, shares[r]);
    }
    EXPECT_LE(hi - lo, 1);
  }
}

TEST(BatchShares, ConstantGlobalKeepsTheDegradedPerSlotLoad) {
  std::mt19937_64 rng(17);
  for (int trial = 0; trial < 2000; ++trial) {
    const BatchSplitInput in = random_input(rng);
    const std::vector<std::int64_t> shares = batch_shares(BatchPolicy::kConstantGlobal, in);
    std::int64_t training = 0;
    bool any_healthy = false;
    for (std::int64_t k : in.active) {
      training += k >= in.min_tp ? 1 : 0;
      any_healthy = any_healthy || k == in.base_tp;
    }
    if (!any_healthy) continue;
    std::int64_t lo = in.global_batch;
    std::int64_t hi = 0;
    for (std::size_t r = 0; r < shares.size(); ++r) {
      const std::int64_t k = in.active[r];
      if (k < in.min_tp) continue;
      if (k < in.base_tp) {
        const std::int64_t expected = in.global_batch * k / (training * in.base_tp);
        EXPECT_EQ(shares[r], std::max<std::int64_t>(expected, 1));
      } else {
        lo = std::min(lo, shares[r]);
        hi = std::max(hi, shares[r]);
      }
    }
    EXPECT_LE(hi - lo, 1) << "healthy replicas absorb the rest evenly";
  }
}

TEST(BatchShares, HealthyJobSplitsEvenlyUnderEveryPolicy) {
  BatchSplitInput in{.global_batch = 10, .base_tp = 4, .active = {4, 4, 4}, .min_tp = 1, .planned = {}};
  for (BatchPolicy policy : kPolicies) {
    EXPECT_EQ(batch_shares(policy, in), (std::vector<std::int64_t>{4, 3, 3})) << to_string(policy);
  }
}

TEST(BatchShares, ExamplesFromTheDesign) {
  // 2 replicas x TP 4, replica 0 without slot 2, global batch 8.
  BatchSplitInput in{.global_batch = 8, .base_tp = 4, .active = {3, 4}, .min_tp = 1, .planned = {}};
  EXPECT_EQ(batch_shares(BatchPolicy::kFixed, in), (std::vector<std::int64_t>{4, 4}));
  EXPECT_EQ(batch_shares(BatchPolicy::kProportional, in), (std::vector<std::int64_t>{3, 5}));
  EXPECT_EQ(batch_shares(BatchPolicy::kConstantGlobal, in), (std::vector<std::int64_t>{3, 5}));
  // A power boost of n/k makes the degraded replica as fast as a healthy one:
  // proportional takes the power plan's shares.
  const power::BoostPlan boosted =
      power::plan_boost(4, policy_active(in), /*headroom_w=*/1000.0, 8, power::DevicePowerModel{});
  for (const power::ReplicaBoost& r : boosted.replicas) in.planned.push_back(r.share);
  EXPECT_EQ(batch_shares(BatchPolicy::kProportional, in), (std::vector<std::int64_t>{4, 4}));
  EXPECT_EQ(batch_shares(BatchPolicy::kFixed, in), (std::vector<std::int64_t>{4, 4}));
  // dp 3 x tp 4 with failed {0 = [1], 2 = [0, 3]}, batch 12.
  BatchSplitInput three{.global_batch = 12, .base_tp = 4, .active = {3, 4, 2}, .min_tp = 1, .planned = {}};
  EXPECT_EQ(batch_shares(BatchPolicy::kProportional, three), (std::vector<std::int64_t>{4, 5, 3}));
  EXPECT_EQ(batch_shares(BatchPolicy::kConstantGlobal, three), (std::vector<std::int64_t>{3, 7, 2}));
  // min_tp 3 drops replica 2.
  three.min_tp = 3;
  EXPECT_EQ(batch_shares(BatchPolicy::kFixed, three), (std::vector<std::int64_t>{6, 6, 0}));
}

TEST(BatchShares, ProportionalWithoutAPlanIsThePowerPolicysUnboostedSplit) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    BatchSplitInput in;
    in.base_tp = std::uniform_int_distribution<std::int64_t>(1, 8)(rng);
    const std::int64_t replicas = std::uniform_int_distribution<std::int64_t>(1, 6)(rng);
    for (std::int64_t r = 0; r < replicas; ++r) {
      in.active.push_back(std::uniform_int_distribution<std::int64_t>(1, in.base_tp)(rng));
    }
    in.global_batch = std::uniform_int_distribution<std::int64_t>(replicas * in.base_tp, 100)(rng);
    EXPECT_EQ(batch_shares(BatchPolicy::kProportional, in),
              power::shares_without_boost(static_cast<int>(in.base_tp), policy_active(in),
                                          in.global_batch));
  }
}

TEST(BatchShares, PlannedSharesKeepEveryTrainingReplicaInTheStep) {
  BatchSplitInput in{.global_batch = 3, .base_tp = 4, .active = {1, 4, 4}, .min_tp = 1,
                     .planned = {0, 2, 1}};
  // A replica with no sample would leave its peers waiting in the gradient sync.
  EXPECT_EQ(batch_shares(BatchPolicy::kProportional, in), (std::vector<std::int64_t>{1, 1, 1}));
  in.planned = {1, 2};
  EXPECT_THROW(batch_shares(BatchPolicy::kProportional, in), std::invalid_argument);
}

TEST(PolicyActive, DroppedReplicasSitOut) {
  const BatchSplitInput in{.global_batch = 8, .base_tp = 4, .active = {3, 1, 4}, .min_tp = 2,
                           .planned = {}};
  EXPECT_EQ(policy_active(in), (std::vector<int>{3, 0, 4}));
}

TEST(SampleSchedule, SequentialIsLlmcOrder) {
  // 1000 tokens, T = 8: 124 samples; B = 10: 12 steps per epoch, tail unused.
  const std::int64_t samples = samples_in(1000, 8);
  EXPECT_EQ(samples, 124);
  SampleSchedule schedule(samples, 10, DataOrder::kSequential, 1);
  EXPECT_EQ(schedule.steps_per_epoch(), 12);
  std::vector<std::int64_t> expected(10);
  std::iota(expected.begin(), expected.end(), 30);
  EXPECT_EQ(schedule.step_samples(3), expected);
  EXPECT_EQ(schedule.step_samples(12 + 3), expected) << "wraps to the start like llm.c";
}

TEST(SampleSchedule, ShuffledEpochsArePermutationsSeededPerEpoch) {
  SampleSchedule schedule(103, 10, DataOrder::kShuffled, 5);
  for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
    std::set<std::int64_t> seen;
    for (std::int64_t s = 0; s < schedule.steps_per_epoch(); ++s) {
      for (std::int64_t id : schedule.step_samples(epoch * schedule.steps_per_epoch() + s)) {
        EXPECT_GE(id, 0);
        EXPECT_LT(id, 103);
        EXPECT_TRUE(seen.insert(id).second) << "sample " << id << " twice in epoch " << epoch;
      }
    }
    EXPECT_EQ(seen.size(), 100u);
  }
  EXPECT_NE(schedule.step_samples(0), schedule.step_samples(schedule.steps_per_epoch()));
  EXPECT_EQ(schedule.step_samples(4), SampleSchedule(103, 10, DataOrder::kShuffled, 5).step_samples(4));
  EXPECT_NE(schedule.step_samples(4), SampleSchedule(103, 10, DataOrder::kShuffled, 6).step_samples(4));
}

TEST(SampleSchedule, TheKeptPermutationFollowsTheEpochBackAndForth) {
  const SampleSchedule walked(103, 10, DataOrder::kShuffled, 5);
  for (std::int64_t step : {0, 25, 3, 11, 9, 40, 1}) {  // epochs 0, 2, 0, 1, 0, 4, 0
    EXPECT_EQ(walked.step_samples(step), SampleSchedule(103, 10, DataOrder::kShuffled, 5).step_samples(step))
        << "step " << step;
  }
}

TEST(SampleSchedule, PermutationIsAPermutation) {
  for (std::int64_t count : {0, 1, 2, 17, 1000}) {
    std::vector<std::int64_t> perm = epoch_permutation(count, 3, 2);
    std::sort(perm.begin(), perm.end());
    std::vector<std::int64_t> identity(static_cast<std::size_t>(count));
    std::iota(identity.begin(), identity.end(), 0);
    EXPECT_EQ(perm, identity);
  }
}

TEST(SampleSchedule, DatasetSmallerThanABatchNamesTheKey) {
  try {
    SampleSchedule(5, 8, DataOrder::kShuffled, 1);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("train.global_batch"), std::string::npos);
  }
}

TEST(AssignSamples, ContiguousChunksInReplicaOrder) {
  const std::vector<std::int64_t> samples = {9, 4, 7, 1, 3, 8};
  const auto parts = assign_samples(samples, {2, 0, 4});
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0], (std::vector<std::int64_t>{9, 4}));
  EXPECT_TRUE(parts[1].empty());
  EXPECT_EQ(parts[2], (std::vector<std::int64_t>{7, 1, 3, 8}));
  EXPECT_THROW(assign_samples(samples, {2, 2}), std::invalid_argument);
}

TEST(MicroBatches, CoverTheShareWithOneSmallerTail) {
  for (std::int64_t share = 0; share < 30; ++share) {
    for (std::int64_t micro = 1; micro < 9; ++micro) {
      const std::vector<std::int64_t> sizes = micro_batches(share, micro);
      EXPECT_EQ(sum(sizes), share);
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        EXPECT_GE(sizes[i], 1);
        EXPECT_LE(sizes[i], micro);
        if (i + 1 < sizes.size()) {
          EXPECT_EQ(sizes[i], micro);
        }
      }
    }
  }
}

// parallel.microbatches = count: min(count, share) micro-batches, sizes within
// one of each other, larger first; count 0 falls back to the size rule.
TEST(MicroBatches, ACountCutsTheShareIntoNearEqualParts) {
  for (std::int64_t share = 0; share < 30; ++share) {
    for (std::int64_t count = 1; count < 9; ++count) {
      const std::vector<std::int64_t> sizes = micro_batches(share, 4, count);
      EXPECT_EQ(sum(sizes), share);
      EXPECT_EQ(static_cast<std::int64_t>(sizes.size()), std::min(share, count)) << share << " " << count;
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        EXPECT_GE(sizes[i], 1);
        EXPECT_LE(sizes.front() - sizes[i], 1) << share << " " << count;
        if (i + 1 < sizes.size()) {
          EXPECT_GE(sizes[i], sizes[i + 1]);
        }
      }
    }
    EXPECT_EQ(micro_batches(share, 4, 0), micro_batches(share, 4));
  }
  EXPECT_EQ(micro_batches(10, 4, 4), (std::vector<std::int64_t>{3, 3, 2, 2}));
  EXPECT_THROW(micro_batches(10, 4, -1), std::invalid_argument);
}

TEST(SplitInput, ReadsActiveSlotsFromTheConfig) {
  ParallelConfig parallel;
  parallel.tp = 4;
  parallel.dp = 3;
  parallel.failed = {{{0, 0}, {1}}, {{2, 0}, {0, 3}}};
  const BatchSplitInput in = split_input(parallel, 12);
  EXPECT_EQ(in.active, (std::vector<std::int64_t>{3, 4, 2}));
  EXPECT_EQ(in.base_tp, 4);
  EXPECT_EQ(in.global_batch, 12);
}

}  // namespace
}  // namespace ntp::train
