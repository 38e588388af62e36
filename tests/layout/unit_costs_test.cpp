// Unit costs from the model shape, phase loads, and the argument of
// unit_costs.h in numbers: at TP 30 of the 480B example, balancing work
// across kinds (fewer neurons where a slot holds an extra head) lowers the
// busiest slot's summed work but lengthens the synchronous step.
#include "layout/unit_costs.h"

#include <gtest/gtest.h>

#include "layout/job_layout.h"

namespace ntp::layout {
namespace {

// examples/sim/b200_32k.toml: hidden 20,480, 128 heads of 160, FFN 81,920,
// 16,384 tokens.
ModelShape gpt_480b() {
  return {.d_model = 20480,
          .heads = 128,
          .ffn = 81920,
          .vocab = 131072,
          .seq_len = 16384,
          .layers = 100};
}

TEST(UnitCosts, Gpt2AndLlamaFromTheirShapes) {
  const UnitCosts gpt2 =
      unit_costs({.d_model = 768, .heads = 12, .ffn = 3072, .vocab = 50304, .seq_len = 1024});
  EXPECT_DOUBLE_EQ(gpt2.head,
                   3 * (2.0 * 768 * 64 * 4 + 2.0 * 64 * 1024));  // QKV + proj, causal attention
  EXPECT_DOUBLE_EQ(gpt2.neuron, 3 * 4.0 * 768);
  EXPECT_DOUBLE_EQ(gpt2.vocab_row, 3 * 2.0 * 768);
  // llama-1b: a KV group of 4 query heads of 64; SwiGLU neurons.
  const UnitCosts llama = unit_costs({.d_model = 2048,
                                      .heads = 32,
                                      .kv_heads = 8,
                                      .ffn = 5632,
                                      .gated_ffn = true,
                                      .vocab = 32000,
                                      .seq_len = 2048});
  EXPECT_DOUBLE_EQ(llama.head,
                   3 * (2.0 * 2048 * 64 * 6 + 2.0 * 2048 * 64 * 4 + 2.0 * 4 * 64 * 2048));
  EXPECT_DOUBLE_EQ(llama.neuron, 3 * 6.0 * 2048);
  EXPECT_THROW(
      unit_costs({.d_model = 768, .heads = 12, .kv_heads = 5, .ffn = 1, .vocab = 1, .seq_len = 1}),
      std::invalid_argument);
  EXPECT_THROW(unit_costs({.d_model = 768, .heads = 12, .ffn = 3072, .vocab = 50304}),
               std::invalid_argument);
}

TEST(UnitCosts, A480bHeadCostsAs384Neurons) {
  const UnitCosts c = unit_costs(gpt_480b());
  EXPECT_DOUBLE_EQ(c.head / c.neuron, 384.0);  // (8 d hd + 2 hd T) / 4 d
}

JobLayout plan(Unit units, Unit align) {
  return plan_job({.units = units, .tp = 30, .replicas = 1, .align = align});
}

TEST(PhaseLoad, TheBusiestSlotOverTheIdealPerPhase) {
  const UnitCosts c = unit_costs(gpt_480b());
  const PhaseLoad attention = phase_load(plan(128, 1).replica(0), c.head);
  EXPECT_DOUBLE_EQ(attention.ratio(), 5.0 / (128.0 / 30));  // 8 slots hold 5 heads
  EXPECT_EQ(attention.busiest_slot, 0);
  EXPECT_DOUBLE_EQ(phase_load(plan(81920, 64).replica(0), c.neuron).ratio(),
                   2752.0 / (81920.0 / 30));
  EXPECT_DOUBLE_EQ(phase_load(plan(81920, 1).replica(0), c.neuron).ratio(),
                   2731.0 / (81920.0 / 30));
  // A slot at half speed holding a full share is the busiest, at twice its time.
  const PhaseLoad slow = phase_load(plan(81920, 64).replica(0), c.neuron, [] {
    std::vector<double> s(30, 1.0);
    s[29] = 0.5;
    return s;
  }());
  EXPECT_EQ(slow.busiest_slot, 29);
  EXPECT_DOUBLE_EQ(slow.busiest, 2 * 2688 * c.neuron);
  EXPECT_DOUBLE_EQ(slow.ideal, 81920 * c.neuron / 29.5);
}

TEST(PhaseLoad, BalancingAcrossKindsLengthensTheSynchronousStep) {
  const ModelShape shape = gpt_480b();
  const UnitCosts c = unit_costs(shape);
  const ReplicaLayout heads = plan(128, 1).replica(0);
  const ReplicaLayout vocab = plan(131072, 64).replica(0);
  const JobLayout per_kind = plan(81920, 64);
  // Cross-kind: the 8 slots with 5 heads take 384 neurons (one head's work)
  // fewer, in blocks of 64: 39 blocks there, 44 on the other 22 slots.
  SlotShares cross{64, std::vector<Unit>(30, 44 * 64)};
  for (int i = 0; i < 8; ++i) cross.units[static_cast<size_t>(i)] = 39 * 64;
  std::vector<int> all(30);
  for (int i = 0; i < 30; ++i) all[static_cast<size_t>(i)] = i;
  const ReplicaLayout cross_kind = replica_layout(81920, 30, all, per_kind.sync_partition, cross);

  // The busiest slot's summed work per layer favours the cross-kind cut
  // (4,416 vs 4,672 neuron-units of work)...
  const auto summed_max = [&](const ReplicaLayout& neurons) {
    double most = 0;
    for (int s = 0; s < 30; ++s)
      most = std::max(most, heads.slots[static_cast<size_t>(s)].size() * c.head +
                                neurons.slots[static_cast<size_t>(s)].size() * c.neuron);
    return most / c.neuron;
  };
  EXPECT_DOUBLE_EQ(summed_max(per_kind.replica(0)), 5 * 384 + 2752);
  EXPECT_DOUBLE_EQ(summed_max(cross_kind), 5 * 384 + 2496);
  // ...but the phases end in barriers: attention 1,920 either way, MLP 2,752
  // against 2,816, so the step is longer with the cross-kind cut.
  const StepLoad a = step_load(shape, heads, per_kind.replica(0), vocab);
  const StepLoad b = step_load(shape, heads, cross_kind, vocab);
  EXPECT_DOUBLE_EQ(a.mlp.busiest / c.neuron, 2752);
  EXPECT_DOUBLE_EQ(b.mlp.busiest / c.neuron, 2816);
  EXPECT_DOUBLE_EQ(a.attention.busiest, b.attention.busiest);
  EXPECT_LT(a.busiest, b.busiest);
  EXPECT_DOUBLE_EQ(a.ideal, b.ideal);
}

TEST(PhaseLoad, RejectsADroppedReplicaOrWrongSpeeds) {
  const JobLayout job =
      plan_job({.units = 8, .tp = 4, .replicas = 2, .failed = {{1, {0, 1}}}, .min_tp = 3});
  EXPECT_THROW(phase_load(job.replica(1), 1.0), std::invalid_argument);
  EXPECT_THROW(phase_load(job.replica(0), 1.0, {1.0, 1.0}), std::invalid_argument);
}

}  // namespace
}  // namespace ntp::layout
