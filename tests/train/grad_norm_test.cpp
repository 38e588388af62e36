// The exact gradient norm: the same bits for any split of the units among a
// replica's ranks, so replicas at different TP degrees clip alike.
#include "train/grad_norm.h"

#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "tests/model/model_test_util.h"

namespace ntp::train {
namespace {

// A full-model gradient with values spread over many magnitudes (the worst
// case for a float sum whose order changes).
std::vector<float> random_grads(const model::ParameterLayout& full, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-20, 4);
  std::vector<float> g(static_cast<std::size_t>(full.size()));
  for (float& x : g) x = std::ldexp(normal(rng), exponent(rng));
  return g;
}

// The replica's norm part when `shards` split the model among its ranks.
NormPart replica_part(const model::GptConfig& c, const std::vector<float>& full_grads,
                      const std::vector<model::Shard>& shards, tensor::Context& ctx) {
  const model::ParameterLayout full(c, model::Shard::full(c));
  NormPart total;
  for (std::size_t r = 0; r < shards.size(); ++r) {
    const model::ParameterLayout layout(c, shards[r]);
    std::vector<float> grads(static_cast<std::size_t>(layout.size()));
    model::scatter_from_full(full, full_grads, layout, grads);
    total.add(grad_norm_part(layout, grads, r == 0, ctx));
  }
  return total;
}

TEST(GradNorm, TheSameBitsForEverySplitOfTheUnits) {
  const model::GptConfig c = model::testing::small_test_config();
  const model::ParameterLayout full(c, model::Shard::full(c));
  tensor::Context ctx({1});
  for (std::uint32_t seed = 1; seed <= 20; ++seed) {
    const std::vector<float> g = random_grads(full, seed);
    const NormPart one = replica_part(c, g, {model::Shard::full(c)}, ctx);
    double reference = 0;
    for (float x : g) reference += static_cast<double>(x) * x;
    EXPECT_NEAR(one.norm(), std::sqrt(reference), 1e-12 * std::sqrt(reference));
    for (int ranks = 2; ranks <= 7; ++ranks) {
      const NormPart split = replica_part(c, g, model::testing::random_shards(c, ranks, seed * 31 + ranks), ctx);
      ASSERT_TRUE(split.fixed == one.fixed) << "seed " << seed << ", " << ranks << " ranks";
      ASSERT_EQ(split.norm(), one.norm());
    }
  }
}

TEST(GradNorm, OneUlpInOneGradientChangesIt) {
  // The comparison above can fail: the fixed point resolves a one-ulp change.
  const model::GptConfig c = model::testing::small_test_config();
  const model::ParameterLayout full(c, model::Shard::full(c));
  tensor::Context ctx({1});
  std::vector<float> g = random_grads(full, 3);
  const NormPart before = replica_part(c, g, {model::Shard::full(c)}, ctx);
  g[1234] = std::nextafter(g[1234], 1e9f);
  const NormPart after = replica_part(c, g, {model::Shard::full(c)}, ctx);
  EXPECT_FALSE(before.fixed == after.fixed);
}

TEST(GradNorm, ANonFiniteOrHugeGradientIsReportedAsInfinite) {
  const model::GptConfig c = model::testing::small_test_config();
  const model::ParameterLayout full(c, model::Shard::full(c));
  tensor::Context ctx({1});
  std::vector<float> g(static_cast<std::size_t>(full.size()), 0.5f);
  g[7] = std::nanf("");
  EXPECT_TRUE(std::isinf(replica_part(c, g, {model::Shard::full(c)}, ctx).norm()));
  g[7] = 1e30f;
  EXPECT_TRUE(std::isinf(replica_part(c, g, {model::Shard::full(c)}, ctx).norm()));
}

TEST(GradNorm, ThePartSurvivesTheCommitRecord) {
  NormPart p;
  p.fixed = (static_cast<Fixed128>(0x0123456789abcdefull) << 64) | 0xfedcba9876543210ull;
  std::int64_t words[NormPart::kWords];
  p.write(words);
  const NormPart back = NormPart::read(words);
  EXPECT_TRUE(back.fixed == p.fixed);
  EXPECT_FALSE(back.overflow);
}

}  // namespace
}  // namespace ntp::train
