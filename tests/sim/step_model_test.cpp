#include <gtest/gtest.h>

#include <cmath>

#include "sim/policy_table.h"
#include "sim/step_model.h"
#include "test_scenarios.h"

namespace ntp::sim {
namespace {

TEST(StepModel, FlopsPerTokenMatchesMegatronFormula) {
  const Scenario s;  // reference: FFN = 4h
  const StepBreakdown b = StepModel(s).healthy();
  const double l = 100, h = 20480, sl = 16384, v = 131072;
  const double megatron = 72.0 * l * h * h * (1.0 + sl / (6.0 * h) + v / (12.0 * h * l));
  EXPECT_NEAR(b.flops_per_token / megatron, 1.0, 1e-12);
  EXPECT_NEAR(b.params / 5.06e11, 1.0, 0.01);  // 12 l h^2 + V h
}

TEST(StepModel, ReferenceSetupIsPlausibleAgainstPublishedMfu) {
  // Megatron-LM reports 41-48 % MFU for 2B-462B GPTs on H100 clusters, Llama 3
  // 405B 38-43 % on 16k H100s; a model far outside 30-55 % would be suspect.
  const StepBreakdown b = StepModel(Scenario{}).healthy();
  EXPECT_GT(b.mfu, 0.30);
  EXPECT_LT(b.mfu, 0.55);
  EXPECT_NEAR(b.microbatches, 4.0, 1e-12);  // 1,024 sequences over 256 replicas
  EXPECT_NEAR(b.step_s, (b.microbatches + 3.0 / 5.0) * b.microbatch_s + b.dp_exposed_s, 1e-12);
}

TEST(StepModel, ComputeScalesWithLargestUnitCount) {
  const Scenario s = testing::small_scenario();
  const StepModel m(s);
  // 24 heads, 6144 neurons, 4800 rows all divide 8, 6 and 4: exact n/k scaling.
  EXPECT_NEAR(m.compute_s(6) / m.compute_s(8), 8.0 / 6.0, 1e-12);
  EXPECT_NEAR(m.compute_s(4) / m.compute_s(8), 2.0, 1e-12);
  // 24 heads over 5 GPUs: the busiest holds 5, i.e. more than 24/5.
  EXPECT_GT(m.compute_s(5) / m.compute_s(8), 8.0 / 5.0);
}

TEST(StepModel, NtpReplicaContributesKOverNUpToCommunicationTerms) {
  // With PP 1 a replica at k of n contributes its stage speed
  // tau_n / tau_k, where tau_k = C n/k + X_k (X: exposed TP + p2p). Hence
  // k/n <= share <= k/n * (1 + X_n / C): the documented communication term.
  Scenario s = testing::small_scenario();
  // The bound is about communication: keep the unaligned-GEMM penalty out
  // (at k = 7, 878 neurons and 686 rows are not multiples of 8).
  s.efficiency.unaligned_gemm = 1.0;
  const StepModel m(s);
  const PolicyTable t = make_policy_table(Policy::kNtp, s, m);
  const double c = m.compute_s(8);
  const double x = m.microbatch_s(8) - c;
  ASSERT_GT(x, 0.0);
  for (const int k : {4, 6, 7}) {
    const double kn = k / 8.0;
    const double share = t.share[static_cast<std::size_t>(k)];
    EXPECT_GE(share, kn * (1.0 - 1e-12)) << k;
    EXPECT_LE(share, kn * (1.0 + x / c) * (1.0 + 1e-12)) << k;
  }
  // Where k divides every unit count the share is exactly tau_n / tau_k with
  // tau_k = C n/k + X_k: the bounds above are this formula's two limits.
  for (const int k : {4, 6}) {
    ASSERT_EQ(t.run_tp[static_cast<std::size_t>(k)], k);
    const double x_k = m.microbatch_s(k) - m.compute_s(k);
    EXPECT_LT(x_k, x) << k;  // a smaller group's all-reduce moves less per GPU
    EXPECT_NEAR(t.share[static_cast<std::size_t>(k)], (c + x) / (c * 8.0 / k + x_k), 1e-12) << k;
  }
}

TEST(StepModel, ReferenceSharesFollowTheBubbleFormula) {
  // Reference: 128 heads at TP 30 leave the busiest GPU 5 heads (4.27 on
  // average), and with PP 4 the bubble is paid at the slow replica's pace.
  // Neurons and rows are cut in blocks of 64 (2,752 and 4,416 on the busiest
  // GPU, against 2,731 and 4,370 one unit at a time): f 0.901, not 0.904.
  const Scenario s;
  const StepModel m(s);
  const PolicyTable t = make_policy_table(Policy::kNtp, s, m);
  ASSERT_EQ(t.run_tp[30], 30);
  const double f = m.microbatch_s(32) / m.microbatch_s(30);
  EXPECT_DOUBLE_EQ(t.speed[30], f);
  EXPECT_LT(f, 30.0 / 32.0);  // uneven heads cost more than the lost GPUs
  EXPECT_NEAR(f, 0.901, 5e-4);  // docs/sim.md
  const double mb = m.microbatches(), b = m.bubble_ratio();
  EXPECT_DOUBLE_EQ(t.share[30], ((mb + b) * f - b) / mb);
  EXPECT_LT(t.share[30], f);
  EXPECT_NEAR(t.share[30], 0.886, 5e-4);  // docs/sim.md
}

// C(k) in the closed form of the old model: ceil(U / k) units of each kind on
// the busiest GPU, every GEMM at full speed.
double ceil_compute_s(const Scenario& s, int k, double heads, double neurons, double rows) {
  const double h = s.model.hidden, sl = s.model.seq_len;
  const double ls = static_cast<double>(s.model.layers) / s.parallel.pp;
  const double flops = ls * ((8 * h * h + 4 * sl * h) / s.model.heads * heads + 4 * h * neurons) +
                       2 * h * rows / s.parallel.pp;
  (void)k;
  return 3.0 * sl * s.model.micro_batch * flops / (s.cluster.peak_tflops * 1e12 * s.efficiency.gemm);
}

// The need comes from the layout library's replica layouts: one-unit cuts
// (align 1) are the old ceil(U / k) exactly; blocks of 64 put more units on
// the busiest GPU of the reference at TP 30 (2,752 neurons, 4,416 rows).
TEST(StepModel, ComputeIsTheLayoutsBusiestGpuInAlignedBlocks) {
  Scenario s;  // reference: 128 heads, FFN 81,920, vocabulary 131,072, TP 32
  s.efficiency.unaligned_gemm = 1.0;  // count units only
  s.parallel.align = 1;
  const double one_unit = StepModel(s).compute_s(30);
  EXPECT_DOUBLE_EQ(one_unit, ceil_compute_s(s, 30, 5, 2731, 4370));
  s.parallel.align = 64;
  const StepModel aligned(s);
  EXPECT_DOUBLE_EQ(aligned.compute_s(30), ceil_compute_s(s, 30, 5, 2752, 4416));
  EXPECT_GT(aligned.compute_s(30), one_unit);  // the ceil need would miss this
  // A healthy group splits evenly either way: 4 heads, 2,560 neurons, 4,096 rows.
  EXPECT_DOUBLE_EQ(aligned.compute_s(32), ceil_compute_s(s, 32, 4, 2560, 4096));
  EXPECT_DOUBLE_EQ(aligned.ideal_compute_s(32), aligned.compute_s(32));
  EXPECT_LT(aligned.ideal_compute_s(30), aligned.compute_s(30));
}

// A GPU whose shard is not a multiple of efficiency.gemm_align_elements
// columns wide runs its GEMMs at unaligned_gemm of full speed; aligned
// shards are untouched. Small scenario, one-unit cuts: at k = 6 every width
// is aligned (4 heads x 64, 1,024 neurons, 800 rows); at k = 7 the 4-head
// attention is (256 columns), the 878 neurons and 686 rows are not.
TEST(StepModel, UnalignedGemmPenaltyAppliesOnlyToUnalignedWidths) {
  Scenario s = testing::small_scenario();
  s.efficiency.unaligned_gemm = 1.0;
  const StepModel full(s);
  s.efficiency.unaligned_gemm = 0.25;
  const StepModel slow(s);
  EXPECT_DOUBLE_EQ(slow.compute_s(8), full.compute_s(8));
  EXPECT_DOUBLE_EQ(slow.compute_s(6), full.compute_s(6));
  EXPECT_DOUBLE_EQ(slow.compute_s(6), ceil_compute_s(s, 6, 4, 1024, 800));
  EXPECT_DOUBLE_EQ(full.compute_s(7), ceil_compute_s(s, 7, 4, 878, 686));
  // Attention at full speed, the MLP and the LM head four times slower.
  EXPECT_NEAR(slow.compute_s(7), ceil_compute_s(s, 7, 4, 4 * 878, 4 * 686), 1e-15);
  // At an alignment of 2 the 877-neuron and 685-row shards (odd) set the pace.
  s.efficiency.gemm_align_elements = 2;
  EXPECT_NEAR(StepModel(s).compute_s(7), ceil_compute_s(s, 7, 4, 4 * 877, 4 * 685), 1e-15);
  s.efficiency.gemm_align_elements = 1;  // every width aligned
  EXPECT_DOUBLE_EQ(StepModel(s).compute_s(7), full.compute_s(7));
}

// The reference at the measured degrees (docs/sim.md, "Alignment"): with
// one-unit cuts the busiest GPU of TP 30 is about 3x slower than TP 32 (no
// neuron or row shard is a multiple of 8); in blocks of 64 it is near the
// FLOP ratio 32/30.
TEST(StepModel, OneUnitCutsAreSeveralTimesSlowerAlignedOnesNearTheFlopRatio) {
  Scenario s;
  s.parallel.align = 1;
  const StepModel cut(s);
  s.parallel.align = 64;
  const StepModel aligned(s);
  for (const int k : {31, 30, 28, 24}) {
    EXPECT_GT(cut.compute_s(k) / cut.compute_s(32), 2.5) << k;
    const double ratio = aligned.compute_s(k) / aligned.compute_s(32);
    EXPECT_GT(ratio, 32.0 / k) << k;
    EXPECT_LT(ratio, 1.10 * 32.0 / k) << k;
  }
}

TEST(StepModel, WithoutCommunicationAReplicaAtKOfNIsExactlyKOverN) {
  Scenario s = testing::small_scenario();
  s.efficiency.tp_overlap = 1.0;  // TP hidden; PP 1: no p2p
  const StepModel m(s);
  const PolicyTable t = make_policy_table(Policy::kNtp, s, m);
  for (const int k : {4, 6, 8}) EXPECT_NEAR(t.share[static_cast<std::size_t>(k)], k / 8.0, 1e-12);
}

TEST(StepModel, ProportionalShareAccountsForTheBubble) {
  Scenario s = testing::small_scenario();
  s.cluster.gpus = 512;
  s.parallel.pp = 2;
  s.parallel.virtual_stages = 1;
  s.model.layers = 8;
  validate(s);
  const StepModel m(s);  // m = 2 microbatches, bubble b = 1
  EXPECT_NEAR(m.proportional_share(1.0), 1.0, 1e-12);
  // x = (m + b) f - b = 3 * 0.75 - 1 = 1.25 of 2 microbatches.
  EXPECT_NEAR(m.proportional_share(0.75), 0.625, 1e-12);
  EXPECT_EQ(m.proportional_share(0.2), 0.0);
}

TEST(StepModel, SyncingAtLowerDegreeCostsMoreAndHealthyHasNoReshard) {
  const StepModel m(Scenario{});
  EXPECT_EQ(m.reshard_s(32), 0.0);
  EXPECT_GT(m.reshard_s(30), 0.0);
  EXPECT_GT(m.dp_sync_s(28), m.dp_sync_s(30));
  EXPECT_GE(m.step_s(28), m.step_s(32));
}

// The reshard volume is the layout library's plan: syncing TP 8 at K = 6,
// the two extra slots of a healthy replica each send their whole shard
// (3 heads, 768 neurons, 600 rows) to the core slots, which receive a third
// of that each: the busiest GPU is a sender.
TEST(StepModel, ReshardVolumeIsTheLayoutPlansBusiestGpu) {
  const Scenario s = testing::small_scenario();  // h 1536, 24 heads, FFN 6144, V 4800, 8 layers, PP 1
  const StepModel m(s);
  const double h = 1536, ls = 8, head = 4.0 * h * (h / 24) * ls, neuron = 2.0 * h * ls, row = h;
  const double sender = 3 * head + 768 * neuron + 600 * row;
  EXPECT_DOUBLE_EQ(m.reshard_elements(6), sender);
  const double receiver = 1 * head + 256 * neuron + 200 * row;  // what a receive-only count gives
  EXPECT_GT(m.reshard_elements(6), receiver);
  EXPECT_DOUBLE_EQ(m.reshard_s(6), 2.0 * sender * 2 / (1800e9 / 2 * 0.8));
  EXPECT_EQ(m.reshard_elements(8), 0.0);
}

TEST(PolicyTables, PowerBoostNeverSlowsAGroupAndCoversSmallLossesWithHeadroom) {
  Scenario s = testing::small_scenario();
  s.efficiency.tp_overlap = 1.0;
  s.power.headroom_w = 8 * s.cluster.tdp_w;  // ample: the device cap binds
  const StepModel m(s);
  const PolicyTable ntp = make_policy_table(Policy::kNtp, s, m);
  const PolicyTable pw = make_policy_table(Policy::kNtpPw, s, m);
  for (int k = 0; k <= 8; ++k) {
    const auto i = static_cast<std::size_t>(k);
    EXPECT_GE(pw.speed[i], ntp.speed[i]) << k;
    if (k > 0) {
      EXPECT_GE(pw.speed[i], pw.speed[i - 1]) << k;
    }
  }
  // 8/6 = 1.333 needs 1.333^(1/0.65) = 1.556 x TDP: capped at 1.3^0.65 = 1.186.
  EXPECT_NEAR(pw.speed[6], 0.75 * std::pow(1.3, 0.65), 1e-9);
  s.power.max_frac = 1.6;  // now the need is within the device cap: fully covered
  EXPECT_NEAR(make_policy_table(Policy::kNtpPw, s, m).speed[6], 1.0, 1e-9);
}

// The reference TP-30 group: 5 of 128 heads on its busiest GPU, so it needs
// about 1.14x compute speed, more than the 32/30 = 1.067 of an even split.
// Boosting to the modelled need reaches full pace when the budget allows, and
// says what binds when it does not.
TEST(PolicyTables, BoostToTheModelledNeedBringsATp30GroupToFullPace) {
  Scenario s;  // reference
  s.parallel.tp_step = 1;
  const StepModel m(s);
  const double need = m.needed_speedup(30);
  EXPECT_GT(need, 1.13);
  EXPECT_LT(need, 1.15);
  EXPECT_NEAR(m.stage_speed(30, need), 1.0, 1e-12);
  // Needs 1000 * need^(1/0.65) = 1226 W on 30 GPUs: 36.8 kW, 4.8 kW above 32 x TDP.
  s.power.headroom_w = 9600;
  const power::DomainBoost enough = boost_for(s, m, 30);
  EXPECT_TRUE(enough.need_met);
  EXPECT_EQ(enough.cap, power::BoostCap::none);
  EXPECT_EQ(enough.speedup, need);
  const PolicyTable pw = make_policy_table(Policy::kNtpPw, s, m);
  EXPECT_EQ(pw.run_tp[30], 30);
  EXPECT_NEAR(pw.speed[30], 1.0, 1e-12);
  // The even-split need (n/k) would stop short of full pace: the check can fail.
  EXPECT_LT(m.stage_speed(30, 32.0 / 30.0), 0.99);

  s.power.headroom_w = 0;  // only the freed power: 32 kW over 30 GPUs, 1067 W each
  const power::DomainBoost short_of = boost_for(s, m, 30);
  EXPECT_FALSE(short_of.need_met);
  EXPECT_EQ(short_of.cap, power::BoostCap::domain_budget);
  EXPECT_NEAR(short_of.speedup, std::pow(32.0 / 30.0, 0.65), 1e-12);
  EXPECT_LT(m.stage_speed(30, short_of.speedup), 0.99);
  s.power.headroom_w = 1e6;  // any budget, but the device cap of 1.3 x TDP binds at TP 24
  const StepModel m24(s);
  const power::DomainBoost capped = boost_for(s, m24, 24);
  EXPECT_FALSE(capped.need_met);
  EXPECT_EQ(capped.cap, power::BoostCap::device_max);
  EXPECT_NEAR(capped.limit_w, 1300.0, 1e-9);
}

TEST(PolicyTables, DropPoliciesCountOnlyHealthyGroupsAndNtpStopsBelowMinTp) {
  Scenario s = testing::small_scenario();
  s.parallel.tp_step = 2;
  const StepModel m(s);
  const PolicyTable drop = make_policy_table(Policy::kDpDrop, s, m);
  const PolicyTable ntp = make_policy_table(Policy::kNtp, s, m);
  for (int k = 0; k < 8; ++k) EXPECT_EQ(drop.share[static_cast<std::size_t>(k)], 0.0);
  EXPECT_EQ(drop.share[8], 1.0);
  EXPECT_EQ(ntp.run_tp[7], 6);  // rounded down to a multiple of tp_step
  EXPECT_EQ(ntp.run_tp[4], 4);
  EXPECT_EQ(ntp.run_tp[3], 0);  // below min_tp = 4
  EXPECT_EQ(ntp_run_tp(s, 5), 4);
}

}  // namespace
}  // namespace ntp::sim
