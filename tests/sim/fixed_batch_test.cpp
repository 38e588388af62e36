// The fixed-global-batch mechanism (docs/sim.md, "Fixed global batch"): the
// worked example of the documentation, step by step.
#include <gtest/gtest.h>

#include "sim/pricing.h"
#include "sim/replica_view.h"
#include "test_scenarios.h"

namespace ntp::sim {
namespace {

// 512 GPUs in domains of 8, TP 8 x PP 2: 32 replicas of 2 domains each; 32
// microbatches per replica, so a replica at k = 6 takes share
// ((m + b) f - b) / m of a healthy one's samples (0.852: its smaller TP
// all-reduce makes f more than 6/8).
class FixedBatch : public ::testing::Test {
 protected:
  void SetUp() override {
    s.cluster.gpus = 512;
    s.parallel.pp = 2;
    s.parallel.virtual_stages = 1;
    s.model.global_batch_tokens = 2048L * 32 * 32;
    s.policies.fixed_global_batch = true;
    validate(s);
  }
  // Three replicas (0, 1, 2) each lose two GPUs of their first stage.
  ReplicaView three_degraded() const {
    ReplicaView v(s.groups(), s.parallel.pp, s.parallel.tp);
    for (const int group : {0, 2, 4}) v.set_active(group, 6);
    return v;
  }
  // The throughput when the admitted replicas (`replicas` of them, paces
  // summing to `speed`, synced at `sync_tp`) fall short of the batch: the
  // pipeline stretches to P = (dp m + N b) / sum f microbatch times.
  static double paced(const StepModel& m, int dp, double speed, int replicas, int sync_tp) {
    const double mb = m.microbatches(), b = m.bubble_ratio(), tau = m.microbatch_s(m.tp());
    const double pipeline = (dp * mb + replicas * b) / speed;
    return m.step_s(m.tp()) / (m.step_s(sync_tp) - (mb + b) * tau + pipeline * tau);
  }
  Scenario s = testing::small_scenario();
};

TEST_F(FixedBatch, WorkedExample) {
  const Pricing pricing(s);
  const double share = pricing.table(Policy::kNtp).share[6];
  ASSERT_GT(share, 2.0 / 3.0);  // the example needs 0 < 3 (1 - share) < 1
  ASSERT_LT(share, 1.0);
  const ReplicaView healthy(s.groups(), s.parallel.pp, s.parallel.tp);
  const ReplicaView v = three_degraded();
  const StepModel& m = pricing.model();
  const double at_tp6 = m.step_s(8) / m.step_s(6);  // the job syncs at the lowest degree

  // ntp: 29 healthy replicas + 3 x share fall short of 32 by 3 (1 - share) < 1.
  // Two free spare domains form one more replica (PP 2): the job runs at the
  // healthy pace, synced at TP 6. One spare domain forms nothing: the job runs
  // at the pace its 32 replicas allow (it used to pause: a fixed batch only
  // needs a longer step), the better of admitting the three degraded ones
  // (synced at TP 6) or not (29 replicas at TP 8).
  EXPECT_NEAR(pricing.value(Policy::kNtp, v, v, 2), at_tp6, 1e-12);
  const double f6 = pricing.table(Policy::kNtp).speed[6];
  const double with_degraded = paced(m, 32, 29 + 3 * f6, 32, 6);
  const double without = paced(m, 32, 29, 29, 8);
  EXPECT_GT(with_degraded, without);
  EXPECT_NEAR(pricing.value(Policy::kNtp, v, v, 1), with_degraded, 1e-12);
  EXPECT_LT(with_degraded, at_tp6);  // short of the healthy pace
  EXPECT_GT(with_degraded, 0.9);     // but not by much
  EXPECT_EQ(pricing.spares_needed(Policy::kNtp, v), 2);

  // dp-drop: the three replicas take nothing. Two spares forming a replica
  // leave it at 30 of 32, running at that pace; three spares must complete
  // the three replicas (swapped in for the failed domains: the spared view is
  // healthy) for the full pace.
  EXPECT_NEAR(pricing.value(Policy::kDpDrop, v, v, 2), paced(m, 32, 30, 30, 8), 1e-12);
  EXPECT_NEAR(pricing.value(Policy::kDpDrop, v, v, 0), paced(m, 32, 29, 29, 8), 1e-12);
  EXPECT_EQ(pricing.value(Policy::kDpDrop, v, healthy, 0), 1.0);
  EXPECT_EQ(pricing.spares_needed(Policy::kDpDrop, v), 3);
  // Four free spares form two replicas: 29 + 2 = 31, still short.
  EXPECT_NEAR(pricing.value(Policy::kDpDrop, v, v, 4), paced(m, 32, 31, 31, 8), 1e-12);
  EXPECT_EQ(pricing.value(Policy::kDpDrop, v, v, 6), 1.0);

  // With enough spares the degraded replicas are not needed: healthy and
  // formed replicas take the batch alone, synced at TP 8.
  EXPECT_EQ(pricing.value(Policy::kNtp, v, v, 6), 1.0);
}

TEST_F(FixedBatch, SparesNeededIsTheLeastPoolThatTakesTheWholeBatch) {
  // Brute force over the pool against spares_needed, for random states: the
  // pool forms replicas from free spares (until they take the whole batch)
  // and never needs fewer.
  for (const bool pack : {false, true}) {
    s.policies.pack = pack;
    const Pricing pricing(s);
    for (const int k : {7, 6, 5, 3}) {
      ReplicaView v(s.groups(), s.parallel.pp, s.parallel.tp);
      for (int r = 0; r < 5; ++r) v.set_active(r * s.parallel.pp, k);
      for (const Policy p : {Policy::kDpDrop, Policy::kNtp, Policy::kNtpPw}) {
        const int need = pricing.spares_needed(p, v);
        EXPECT_GT(need, 0) << pack << " " << k;
        // Forming alone is one way to cover the shortfall, so the least mix
        // never needs more than forming does.
        int forming = 0;
        while (!takes_full_batch(v, pricing.table(p), pack, forming)) ++forming;
        EXPECT_LE(need, forming) << policy_name(p) << " pack " << pack << " k " << k;
        if (pack) {
          EXPECT_EQ(need, forming) << policy_name(p) << " k " << k;
        }
      }
    }
  }
}

TEST_F(FixedBatch, PackingNeverNeedsMoreSparesAndSometimesFewer) {
  // PP 4 (16 replicas of 4 domains), five degraded first stages at k:
  // unpacked, five replicas run at their share and the shortfall takes
  // replicas formed of 4 spare domains or completions; packed, the degraded
  // groups fill as few replicas as they can and spare groups make the rest
  // whole.
  s.parallel.pp = 4;
  s.model.global_batch_tokens = 2048L * 32 * 16;
  validate(s);
  const auto need = [&](bool pack, int k) {
    s.policies.pack = pack;
    ReplicaView v(s.groups(), s.parallel.pp, s.parallel.tp);
    for (int r = 0; r < 5; ++r) v.set_active(r * s.parallel.pp, k);
    return Pricing(s).spares_needed(Policy::kNtp, v);
  };
  int fewer = 0;
  for (int k = 7; k >= 4; --k) {
    EXPECT_LE(need(true, k), need(false, k)) << k;
    fewer += need(true, k) < need(false, k) ? 1 : 0;
  }
  EXPECT_GT(fewer, 0);
}

TEST_F(FixedBatch, ABrokenShareAccountingIsCaught) {
  // The check is not vacuous: with the degraded replicas counted whole (as if
  // they kept their share at the healthy pace) the job would need no spare.
  const Pricing pricing(s);
  PolicyTable whole = pricing.table(Policy::kNtp);
  for (double& x : whole.share) x = x > 0.0 ? 1.0 : 0.0;
  EXPECT_EQ(spares_for_full_batch(three_degraded(), whole, false, 1), 0);
  EXPECT_EQ(spares_for_full_batch(three_degraded(), pricing.table(Policy::kNtp), false, 1), 2);
}

}  // namespace
}  // namespace ntp::sim
