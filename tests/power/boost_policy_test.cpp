// Properties of the boost-and-rebalance policy: budgets, monotonicity, exact
// shares, no boost for healthy domains, graceful degradation.
#include "power/boost_policy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

namespace ntp::power {
namespace {

const DevicePowerModel kB200{1000.0, 1.3, 0.65};

double budget(int n, double headroom_w, const DevicePowerModel& m) {
  return n * m.tdp_w + headroom_w;
}

long sum(const std::vector<long>& v) { return std::accumulate(v.begin(), v.end(), 0L); }

TEST(BoostToNeed, ReachesAGivenNeedWithinBothCapsAndSaysWhichBinds) {
  // 30 of 32 GPUs that need 1.14x (uneven units), not 32/30.
  const double need = 1.14;
  const double need_limit = 1000.0 * std::pow(need, 1.0 / 0.65);
  const DomainBoost met = boost_to_need(32, 30, need, 30 * need_limit - 32000.0 + 1.0, kB200);
  EXPECT_TRUE(met.need_met);
  EXPECT_EQ(met.speedup, need);
  EXPECT_EQ(met.cap, BoostCap::none);
  EXPECT_DOUBLE_EQ(met.limit_w, need_limit);
  const DomainBoost budget_bound = boost_to_need(32, 30, need, 1000.0, kB200);
  EXPECT_FALSE(budget_bound.need_met);
  EXPECT_EQ(budget_bound.cap, BoostCap::domain_budget);
  EXPECT_NEAR(budget_bound.limit_w, 33000.0 / 30.0, 1e-9);
  EXPECT_LT(budget_bound.speedup, need);
  const DomainBoost device_bound = boost_to_need(32, 30, 1.3, 1e6, kB200);
  EXPECT_EQ(device_bound.cap, BoostCap::device_max);
  EXPECT_DOUBLE_EQ(device_bound.limit_w, 1300.0);
  EXPECT_NEAR(device_bound.speedup, std::pow(1.3, 0.65), 1e-12);
  // No need given (0, NaN) is the even split n/k; a need below 1 never lowers the limit.
  EXPECT_EQ(boost_to_need(32, 30, 0.0, 2000.0, kB200).speedup, 32.0 / 30.0);
  EXPECT_EQ(boost_to_need(32, 30, std::nan(""), 2000.0, kB200).speedup, 32.0 / 30.0);
  EXPECT_EQ(boost_to_need(32, 30, 0.5, 2000.0, kB200).limit_w, 1000.0);
  EXPECT_EQ(std::string(to_string(BoostCap::domain_budget)), "domain_budget");
}

TEST(BoostToNeed, PlanSharesFollowTheNeedReached) {
  // Two degraded replicas at the same k: the one needing more gets less.
  const BoostPlan plan = plan_boost(32, {32, 30, 30}, {0.0, 32.0 / 30.0, 1.2}, 0.0, 3000, kB200);
  EXPECT_EQ(plan.replicas[1].need, 32.0 / 30.0);
  EXPECT_EQ(plan.replicas[2].need, 1.2);
  EXPECT_EQ(plan.replicas[1].speedup, plan.replicas[2].speedup);  // same power either way
  EXPECT_GT(plan.replicas[1].share, plan.replicas[2].share);
  EXPECT_EQ(plan.replicas[0].share + plan.replicas[1].share + plan.replicas[2].share, 3000);
  // The default needs give the plan of the original overload exactly.
  const BoostPlan even = plan_boost(32, {32, 30, 29}, {}, 500.0, 3000, kB200);
  const BoostPlan plain = plan_boost(32, {32, 30, 29}, 500.0, 3000, kB200);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(even.replicas[i].share, plain.replicas[i].share);
  EXPECT_THROW(plan_boost(32, {32, 30}, {1.0}, 0.0, 10, kB200), std::invalid_argument);
}

TEST(BusiestWorkNeed, CountsTheBusiestGpusUnits) {
  // 128 heads: 4 per GPU at TP 32, 5 on the busiest at TP 30, where n/k says 32/30.
  EXPECT_DOUBLE_EQ(busiest_work_need({{128, 1.0}}, 32, 30), 5.0 / 4.0);
  // Evenly divisible work needs exactly n/k: 12 units, 4 per GPU at TP 3, 6 at TP 2.
  EXPECT_DOUBLE_EQ(busiest_work_need({{12, 1.0}}, 3, 2), 1.5);
  // Kinds add by their cost: (2*5 + 1*10) / (2*4 + 1*10) for 128 heads and 300 rows.
  EXPECT_DOUBLE_EQ(busiest_work_need({{128, 2.0}, {300, 1.0}}, 32, 30), 20.0 / 18.0);
  EXPECT_EQ(busiest_work_need({{128, 1.0}}, 32, 32), 1.0);
  EXPECT_EQ(busiest_work_need({{128, 1.0}}, 32, 0), 0.0);
}

TEST(BusiestWorkNeed, RejectsWorkItCannotModel) {
  const auto names_work = [](const std::vector<UnitWork>& work, int n) {
    try {
      busiest_work_need(work, n, 1);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what()).find(n < 1 ? "n (TP degree)" : "work") != std::string::npos;
    }
    return false;
  };
  EXPECT_TRUE(names_work({{-1, 1.0}}, 2));
  EXPECT_TRUE(names_work({{4, -1.0}}, 2));
  EXPECT_TRUE(names_work({{4, std::nan("")}}, 2));
  EXPECT_TRUE(names_work({{4, 0.0}}, 2));  // a healthy GPU does nothing
  EXPECT_TRUE(names_work({}, 2));
  EXPECT_TRUE(names_work({{4, 1.0}}, 0));
}

TEST(DomainSpeedup, HealthyDomainGetsNoBoost) {
  for (const double headroom : {0.0, 500.0, 1e6}) {
    EXPECT_EQ(domain_speedup(8, 8, headroom, kB200), 1.0);
    EXPECT_EQ(domain_limit_w(8, 8, headroom, kB200), kB200.tdp_w);
  }
  const BoostPlan plan = plan_boost(32, {32, 32, 32}, 5000.0, 96, kB200);
  for (const ReplicaBoost& r : plan.replicas) {
    EXPECT_EQ(r.limit_w, kB200.tdp_w);
    EXPECT_EQ(r.speedup, 1.0);
    EXPECT_EQ(r.share, 32);
  }
}

TEST(DomainSpeedup, SittingOutIsZero) {
  EXPECT_EQ(domain_speedup(8, 0, 1000.0, kB200), 0.0);
  EXPECT_EQ(domain_limit_w(8, 0, 1000.0, kB200), 0.0);
}

TEST(DomainSpeedup, MeetsTheNeedExactlyWhenBudgetAllows) {
  // 32 -> 30 needs speed 32/30 = 1.0667: limit 1000 * 1.0667^(1/0.65) = 1104.4 W,
  // inside both the freed budget (32000/30 = 1066.7 W plus headroom) and 1300 W.
  const double need_limit = 1000.0 * std::pow(32.0 / 30.0, 1.0 / 0.65);
  EXPECT_NEAR(need_limit, 1104.39, 0.01);
  EXPECT_EQ(domain_speedup(32, 30, 2000.0, kB200), 32.0 / 30.0);
  EXPECT_DOUBLE_EQ(domain_limit_w(32, 30, 2000.0, kB200), need_limit);
  // More headroom buys nothing more: the limit stays at what the need requires.
  EXPECT_DOUBLE_EQ(domain_limit_w(32, 30, 1e9, kB200), need_limit);
}

TEST(DomainSpeedup, FreedPowerAloneFallsShort) {
  // No headroom: 30 survivors share 32 kW, 1066.7 W each: speed 1.0428 < 1.0667.
  const double s = domain_speedup(32, 30, 0.0, kB200);
  EXPECT_NEAR(s, std::pow(32.0 / 30.0, 0.65), 1e-12);
  EXPECT_LT(s, 32.0 / 30.0);
  EXPECT_NEAR(domain_limit_w(32, 30, 0.0, kB200), 32000.0 / 30.0, 1e-9);
}

TEST(DomainSpeedup, CappedByDeviceMaximum) {
  // 8 -> 4 needs speed 2 (limit 2.9 x TDP); the device stops at 1.3 x TDP.
  EXPECT_DOUBLE_EQ(domain_limit_w(8, 4, 1e6, kB200), 1300.0);
  EXPECT_NEAR(domain_speedup(8, 4, 1e6, kB200), std::pow(1.3, 0.65), 1e-12);
}

TEST(DomainSpeedup, NegativeHeadroomCountsAsZero) {
  EXPECT_EQ(domain_speedup(8, 6, -500.0, kB200), domain_speedup(8, 6, 0.0, kB200));
}

// Random domains, survivors, budgets and models: the k survivors never draw
// more than the domain budget, no GPU exceeds the device maximum, the speed-up
// never exceeds the need n/k and never falls below 1 for a degraded domain.
TEST(BoostPolicyProperty, BudgetsAndDeviceMaximumNeverExceeded) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> pick_n(1, 72);
  std::uniform_real_distribution<double> pick_headroom(0.0, 20000.0);
  std::uniform_real_distribution<double> pick_tdp(100.0, 1500.0);
  std::uniform_real_distribution<double> pick_frac(1.0, 2.0);
  std::uniform_real_distribution<double> pick_alpha(0.2, 1.5);
  for (int trial = 0; trial < 20000; ++trial) {
    const DevicePowerModel m{pick_tdp(rng), pick_frac(rng), pick_alpha(rng)};
    const int n = pick_n(rng);
    const int k = std::uniform_int_distribution<int>(0, n)(rng);
    const double headroom = trial % 5 == 0 ? 0.0 : pick_headroom(rng);
    const double limit = domain_limit_w(n, k, headroom, m);
    const double speed = domain_speedup(n, k, headroom, m);
    ASSERT_LE(k * limit, budget(n, headroom, m)) << "n=" << n << " k=" << k;
    ASSERT_LE(limit, m.max_frac * m.tdp_w);
    if (k == 0) continue;
    ASSERT_LE(speed, static_cast<double>(n) / k);
    ASSERT_GE(speed, 1.0);
    ASSERT_GE(limit, m.tdp_w);
  }
}

TEST(BoostPolicyProperty, SpeedupMonotoneInBudget) {
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int> pick_n(2, 72);
  for (int trial = 0; trial < 2000; ++trial) {
    const DevicePowerModel m{1000.0, 1.0 + 0.5 * (trial % 7) / 6.0, 0.3 + 0.1 * (trial % 9)};
    const int n = pick_n(rng);
    const int k = std::uniform_int_distribution<int>(1, n)(rng);
    double previous = 0.0;
    for (double headroom = 0.0; headroom <= 40000.0; headroom += 97.0) {
      const double s = domain_speedup(n, k, headroom, m);
      ASSERT_GE(s, previous) << "n=" << n << " k=" << k << " headroom=" << headroom;
      previous = s;
    }
  }
}

TEST(BoostPolicyProperty, SharesSumExactlyAndEqualiseStepTime) {
  std::mt19937_64 rng(13);
  for (int trial = 0; trial < 5000; ++trial) {
    const int n = std::uniform_int_distribution<int>(1, 72)(rng);
    const int replicas = std::uniform_int_distribution<int>(1, 40)(rng);
    std::vector<int> active(replicas);
    for (int& k : active) {
      // Mostly healthy replicas, some degraded, a few sitting out.
      const int roll = std::uniform_int_distribution<int>(0, 9)(rng);
      k = roll < 6 ? n : std::uniform_int_distribution<int>(roll == 9 ? 0 : 1, n)(rng);
    }
    active[0] = n;  // at least one replica takes the batch
    const long global_batch = std::uniform_int_distribution<long>(0, 100000)(rng);
    const double headroom = std::uniform_real_distribution<double>(0.0, 5000.0)(rng);
    const BoostPlan plan = plan_boost(n, active, headroom, global_batch, kB200);
    ASSERT_EQ(plan.replicas.size(), active.size());
    long total = 0;
    double weight_sum = 0.0;
    for (const ReplicaBoost& r : plan.replicas) {
      weight_sum += r.active == 0 ? 0.0 : std::min(1.0, r.active * r.speedup / n);
    }
    for (const ReplicaBoost& r : plan.replicas) {
      total += r.share;
      ASSERT_GE(r.share, 0);
      if (r.active == 0) {
        ASSERT_EQ(r.share, 0);
      }
      // Each share is within one sequence of its exact proportional quota.
      const double weight = r.active == 0 ? 0.0 : std::min(1.0, r.active * r.speedup / n);
      ASSERT_NEAR(static_cast<double>(r.share), global_batch * weight / weight_sum, 1.0 + 1e-6);
    }
    ASSERT_EQ(total, global_batch);
    ASSERT_EQ(sum(shares_without_boost(n, active, global_batch)), global_batch);
  }
}

TEST(BoostPlan, DegradesGracefullyAndRebalancesTheRest) {
  // TP 8, 1000 W headroom: replica 1 lost 1 GPU and needs speed 8/7, i.e.
  // 1228.1 W per GPU, within 9000/7 = 1285.7 W: covered. Replica 2 lost 4 and
  // needs speed 2 (2.9 x TDP): it stops at 1.3 x TDP and the shares absorb the rest.
  const BoostPlan plan = plan_boost(8, {8, 7, 4}, 1000.0, 300, kB200);
  const auto& r = plan.replicas;
  EXPECT_EQ(r[0].speedup, 1.0);
  EXPECT_EQ(r[1].speedup, 8.0 / 7.0);
  EXPECT_NEAR(r[1].limit_w, 1228.06, 0.01);
  EXPECT_DOUBLE_EQ(r[2].limit_w, 1300.0);
  const double slow = 0.5 * std::pow(1.3, 0.65);  // replica 2's effective speed, 0.593
  EXPECT_NEAR(r[2].speedup, 2 * slow, 1e-12);
  // Weights 1, 1, 0.593: quotas 115.7, 115.7, 68.6 -> 116, 116, 68.
  EXPECT_EQ(r[0].share, 116);
  EXPECT_EQ(r[1].share, 116);
  EXPECT_EQ(r[2].share, 68);
}

TEST(BoostPlan, PowerOffSharesFollowKOverN) {
  EXPECT_EQ(shares_without_boost(8, {8, 4, 8, 0}, 100), (std::vector<long>{40, 20, 40, 0}));
  // Boost that covers the need gives the degraded replica a full share.
  const BoostPlan boosted = plan_boost(4, {4, 3}, 1e6, 10, kB200);
  EXPECT_EQ(boosted.replicas[0].share, 5);
  EXPECT_EQ(boosted.replicas[1].share, 5);
}

TEST(Apportion, LargestRemainderWithDeterministicTies) {
  EXPECT_EQ(apportion({1, 1, 1}, 10), (std::vector<long>{4, 3, 3}));
  EXPECT_EQ(apportion({1, 1, 1}, 2), (std::vector<long>{1, 1, 0}));
  EXPECT_EQ(apportion({0, 1, 1}, 3), (std::vector<long>{0, 2, 1}));
  EXPECT_EQ(apportion({0.25, 0.75}, 0), (std::vector<long>{0, 0}));
  EXPECT_EQ(apportion({}, 0), std::vector<long>{});
  EXPECT_THROW(apportion({0, 0}, 1), std::invalid_argument);
  EXPECT_THROW(apportion({-1, 2}, 1), std::invalid_argument);
  EXPECT_THROW(apportion({1, 2}, (1L << 53) + 1), std::invalid_argument);
  const std::vector<long> big = apportion({1, 2}, 1L << 53);
  EXPECT_EQ(big[0] + big[1], 1L << 53);
}

TEST(BoostPlan, RejectsBadInputNamingTheField) {
  auto message = [](auto&& call) {
    try {
      call();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { plan_boost(0, {1}, 0, 1, kB200); }).find("n (TP degree)"), std::string::npos);
  EXPECT_NE(message([] { plan_boost(8, {8, 9}, 0, 1, kB200); }).find("active[1] = 9"), std::string::npos);
  EXPECT_NE(message([] { plan_boost(8, {8, -1}, 0, 1, kB200); }).find("active[1]"), std::string::npos);
  EXPECT_NE(message([] { plan_boost(8, {0, 0}, 0, 1, kB200); }).find("active"), std::string::npos);
  EXPECT_NE(message([] { plan_boost(8, {8}, -1, 1, kB200); }).find("headroom_w"), std::string::npos);
  EXPECT_NE(message([] { plan_boost(8, {8}, 0, -1, kB200); }).find("global_batch"), std::string::npos);
  EXPECT_NE(message([] { plan_boost(8, {8}, 0, 1, {0, 1.3, 0.65}); }).find("tdp_w"), std::string::npos);
  EXPECT_NE(message([] { plan_boost(8, {8}, 0, 1, {1000, 0.9, 0.65}); }).find("max_frac"),
            std::string::npos);
  EXPECT_NE(message([] { plan_boost(8, {8}, 0, 1, {1000, 1.3, 0}); }).find("alpha"), std::string::npos);
  // Nothing to place and nobody active is fine.
  EXPECT_EQ(plan_boost(8, {0, 0}, 0, 0, kB200).replicas.size(), 2u);
}

}  // namespace
}  // namespace ntp::power
