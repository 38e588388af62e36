#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "sim/pricing.h"
#include "sim/replica_view.h"
#include "sim/throughput.h"
#include "test_scenarios.h"

namespace ntp::sim {
namespace {

TEST(ReplicaView, HistogramsMatchARecountAfterRandomChanges) {
  const int groups = 60, pp = 3, tp = 8;
  ReplicaView v(groups, pp, tp);
  std::vector<int> k(groups, tp);
  std::mt19937_64 rng(7);
  for (int step = 0; step < 2000; ++step) {
    const int g = static_cast<int>(rng() % groups);
    k[static_cast<std::size_t>(g)] = static_cast<int>(rng() % (tp + 1));
    v.set_active(g, k[static_cast<std::size_t>(g)]);
    if (step % 97 != 0) continue;
    std::vector<int> gh(tp + 1, 0), rh(tp + 1, 0);
    for (int i = 0; i < groups; ++i) ++gh[static_cast<std::size_t>(k[static_cast<std::size_t>(i)])];
    for (int r = 0; r < groups / pp; ++r) {
      const auto first = k.begin() + r * pp;
      ++rh[static_cast<std::size_t>(*std::min_element(first, first + pp))];
    }
    ASSERT_EQ(v.groups_with(), gh);
    ASSERT_EQ(v.replicas_with(), rh);
  }
}

class ThroughputTest : public ::testing::Test {
 protected:
  Scenario s = testing::small_scenario();
};

TEST_F(ThroughputTest, NoFailuresIsFullThroughputForEveryPolicyAndOption) {
  for (const bool pack : {false, true}) {
    for (const bool fixed : {false, true}) {
      s.policies.pack = pack;
      s.policies.fixed_global_batch = fixed;
      const Pricing pricing(s);
      const ReplicaView v(s.groups(), s.parallel.pp, s.parallel.tp);
      for (int p = 0; p < kPolicyCount; ++p) {
        EXPECT_DOUBLE_EQ(pricing.value(static_cast<Policy>(p), v, v), 1.0) << p;
      }
    }
  }
}

TEST_F(ThroughputTest, OneDegradedReplicaUnderNtpAddsItsShareAtTheLowerSyncDegree) {
  const Pricing pricing(s);
  ReplicaView v(s.groups(), s.parallel.pp, s.parallel.tp);
  v.set_active(5, 6);
  const double d = s.dp();
  const double share = pricing.table(Policy::kNtp).share[6];
  const StepModel& m = pricing.model();
  // It trains when that pays for syncing the whole job at TP 6, else it sits out.
  const double with = (d - 1 + share) / d * m.step_s(8) / m.step_s(6);
  EXPECT_NEAR(pricing.value(Policy::kNtp, v, v), std::max(with, (d - 1) / d), 1e-12);
  v.set_active(5, 3);  // below min_tp
  EXPECT_NEAR(pricing.value(Policy::kNtp, v, v), (d - 1) / d, 1e-12);
  EXPECT_NEAR(pricing.value(Policy::kDpDrop, v, v), (d - 1) / d, 1e-12);
}

TEST_F(ThroughputTest, PackingPutsDegradedGroupsIntoFewReplicas) {
  s.cluster.gpus = 512;
  s.parallel.pp = 4;
  s.model.layers = 8;
  s.parallel.virtual_stages = 1;
  validate(s);
  const double d = s.dp();  // 16 replicas of 4 stages
  ReplicaView v(s.groups(), s.parallel.pp, s.parallel.tp);
  v.set_active(0, 7);   // replica 0
  v.set_active(5, 7);   // replica 1
  v.set_active(10, 7);  // replica 2
  s.policies.pack = false;
  EXPECT_NEAR(Pricing(s).value(Policy::kDpDrop, v, v), (d - 3) / d, 1e-12);
  s.policies.pack = true;  // three degraded groups fit one replica
  EXPECT_NEAR(Pricing(s).value(Policy::kDpDrop, v, v), (d - 1) / d, 1e-12);
  const Pricing packed(s);
  s.policies.pack = false;
  EXPECT_GT(packed.value(Policy::kNtp, v, v), Pricing(s).value(Policy::kNtp, v, v));
}

// A fixed global batch that its replicas cannot take at the healthy pace is
// taken at the pace they allow (it used to pause: throughput 0). PP 1, no
// bubble: the step's pipeline stretches by dp / (sum of the replicas' paces).
TEST_F(ThroughputTest, FixedGlobalBatchRunsAtThePaceItsReplicasAllow) {
  s.policies.fixed_global_batch = true;
  const Pricing pricing(s);
  ReplicaView v(s.groups(), s.parallel.pp, s.parallel.tp);
  v.set_active(3, 6);
  const StepModel& m = pricing.model();
  const double d = s.dp();
  const double pipe = m.microbatches() * m.microbatch_s(8);
  const auto stretched = [&](double speed, int sync_tp) {
    return m.step_s(8) / (m.step_s(sync_tp) - pipe + pipe * d / speed);
  };
  EXPECT_NEAR(pricing.value(Policy::kDpDrop, v, v), stretched(d - 1, 8), 1e-12);
  // ntp admits the degraded replica only if its pace is worth the sync at TP 6.
  const double f6 = pricing.table(Policy::kNtp).speed[6];
  EXPECT_NEAR(pricing.value(Policy::kNtp, v, v), std::max(stretched(d - 1 + f6, 6), stretched(d - 1, 8)),
              1e-12);
  EXPECT_LT(pricing.value(Policy::kNtp, v, v), 1.0);  // short of the healthy pace
  EXPECT_GT(pricing.value(Policy::kNtp, v, v), 0.95);
  // One free spare domain forms a replica (PP 1): the degraded replica is
  // not needed and the job syncs at full degree.
  EXPECT_EQ(pricing.value(Policy::kDpDrop, v, v, 1), 1.0);
  EXPECT_EQ(pricing.value(Policy::kNtp, v, v, 1), 1.0);
}

}  // namespace
}  // namespace ntp::sim
