#include "tensor/cross_entropy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace ntp::tensor {
namespace {

TEST(CrossEntropy, MatchesSoftmaxAndIgnoresPaddingColumns) {
  Context ctx({2});
  const LogitShape shape{3, 6, 4};  // columns 4, 5 are padding
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> logits(18);
  for (auto& x : logits) x = d(rng);
  logits[5] = 100.0f;  // a huge padding logit must not matter
  const std::vector<std::int64_t> target{2, 0, 3};
  const std::vector<float> original = logits;

  std::vector<float> row_max(3), sums(6), losses(3);
  crossentropy_local_max(ctx, row_max.data(), logits.data(), shape);
  crossentropy_local_sums(ctx, sums.data(), logits.data(), target.data(), row_max.data(), shape);
  const float scale = 0.25f;
  crossentropy_finish(ctx, losses.data(), logits.data(), target.data(), row_max.data(), sums.data(),
                      scale, shape);
  for (int i = 0; i < 3; ++i) {
    double z = 0.0;
    for (int j = 0; j < 4; ++j) z += std::exp(static_cast<double>(original[i * 6 + j]));
    EXPECT_NEAR(losses[i], std::log(z) - original[i * 6 + target[i]], 1e-5);
    for (int j = 0; j < 4; ++j) {
      const double p = std::exp(static_cast<double>(original[i * 6 + j])) / z;
      EXPECT_NEAR(logits[i * 6 + j], scale * (p - (j == target[i] ? 1.0 : 0.0)), 1e-6);
    }
    EXPECT_EQ(logits[i * 6 + 4], 0.0f);
    EXPECT_EQ(logits[i * 6 + 5], 0.0f);
  }
}

TEST(CrossEntropy, TargetHeldElsewhereContributesNothingLocally) {
  Context ctx({1});
  const LogitShape shape{1, 2, 2};
  std::vector<float> logits{1.0f, 2.0f}, row_max(1), sums(2);
  const std::vector<std::int64_t> target{-1};
  crossentropy_local_max(ctx, row_max.data(), logits.data(), shape);
  crossentropy_local_sums(ctx, sums.data(), logits.data(), target.data(), row_max.data(), shape);
  EXPECT_EQ(row_max[0], 2.0f);
  EXPECT_NEAR(sums[0], std::exp(-1.0) + 1.0, 1e-6);
  EXPECT_EQ(sums[1], 0.0f);
}

// The one-pass form for a rank with the whole vocabulary gives the three
// passes' bits: same ops per row, only the order over rows differs.
// ... and both round dlogits alike when asked.
TEST(CrossEntropy, OnePassPerRowEqualsThePassesBitForBit) {
  Context ctx({2});
  const LogitShape shape{37, 1040, 1001};  // rows split unevenly over the pool; padding columns
  std::mt19937 rng(11);
  std::normal_distribution<float> d(0.0f, 4.0f);
  std::vector<float> passes(static_cast<std::size_t>(shape.rows * shape.cols));
  for (auto& x : passes) x = d(rng);
  std::vector<std::int64_t> target(static_cast<std::size_t>(shape.rows));
  for (std::size_t i = 0; i < target.size(); ++i) target[i] = static_cast<std::int64_t>(i * 131 % 1001);
  std::vector<float> one_pass = passes;

  std::vector<float> row_max(shape.rows), sums(2 * shape.rows), losses(shape.rows);
  crossentropy_local_max(ctx, row_max.data(), passes.data(), shape);
  crossentropy_local_sums(ctx, sums.data(), passes.data(), target.data(), row_max.data(), shape);
  // Both also round dlogits for the bf16 GEMMs: every element, padding included.
  const auto elements = static_cast<std::size_t>(shape.rows * shape.cols);
  std::vector<Bf16> rounded(elements, 0x7fc1), rounded_one(elements, 0x7fc1);
  crossentropy_finish(ctx, losses.data(), passes.data(), target.data(), row_max.data(), sums.data(),
                      0.125f, shape, rounded.data());
  std::vector<float> scratch(2 * shape.rows), losses_one(shape.rows);
  crossentropy_local(ctx, losses_one.data(), one_pass.data(), target.data(), scratch.data(), 0.125f, shape,
                     rounded_one.data());
  EXPECT_EQ(losses_one, losses);
  EXPECT_EQ(one_pass, passes);
  EXPECT_EQ(scratch, sums);
  for (std::size_t i = 0; i < elements; ++i) ASSERT_EQ(rounded[i], to_bf16(passes[i])) << i;
  EXPECT_EQ(rounded_one, rounded);
}

}  // namespace
}  // namespace ntp::tensor
