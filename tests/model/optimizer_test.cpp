#include "model/optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "model_test_util.h"
#include "tests/comm/thread_ranks.h"

namespace ntp::model {
namespace {

TEST(AdamW, GlobalNormCountsEveryParameterOnceAcrossShards) {
  const GptConfig c = testing::small_test_config();
  const ParameterLayout full(c, Shard::full(c));
  std::vector<float> grads(static_cast<std::size_t>(full.size()));
  double want = 0.0;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    grads[i] = static_cast<float>((i % 13) + 1) * 0.25f;
    want += static_cast<double>(grads[i]) * grads[i];
  }
  const auto shards = testing::random_shards(c, 3, 77);
  std::vector<double> norms(3);
  comm::testing::run_group(3, "tp", [&](comm::Group& group) {
    tensor::Context ctx({1});
    Model m(c, shards[static_cast<std::size_t>(group.rank())], ctx, &group);
    scatter_from_full(full, grads, m.layout(), m.grads());  // replicated grads on every rank
    norms[static_cast<std::size_t>(group.rank())] = AdamW::grad_norm(m, [&](double x) {
      group.all_reduce(&x, 1);
      return x;
    });
  });
  for (double n : norms) EXPECT_NEAR(n, std::sqrt(want), 1e-9 * std::sqrt(want));
}

TEST(AdamW, DecaysOnlyTwoDimensionalWeights) {
  const GptConfig c = testing::small_test_config();
  tensor::Context ctx({2});
  Model m(c, Shard::full(c), ctx);
  m.init(3);
  const std::vector<float> before(m.params().begin(), m.params().end());
  AdamWConfig cfg;
  cfg.lr = 0.1f;
  cfg.weight_decay = 0.5f;
  AdamW opt(cfg, m.layout());
  m.zero_grad();  // zero gradients: only weight decay moves anything
  opt.step(m, cfg.lr);
  for (const TensorSpec& t : m.layout().tensors()) {
    for (std::int64_t i = 0; i < t.count; i += 7) {
      const auto k = static_cast<std::size_t>(t.offset + i);
      const float want = t.weight_decay ? before[k] * (1.0f - 0.05f) : before[k];
      ASSERT_FLOAT_EQ(m.params()[k], want) << t.name << "[" << i << "]";
    }
  }
  EXPECT_EQ(opt.steps(), 1);
}

// With bf16 GEMMs the optimizer rounds each weight it updates into the copy
// the GEMMs read, so the next forward need not round them again: after every
// step the model computes exactly what a model freshly given its fp32
// weights computes. The check is shown to fail on a copy left stale.
TEST(AdamW, KeepsTheBf16CopyOfTheWeightsCurrent) {
  const GptConfig c = testing::small_test_config();
  const testing::TokenBatch train = testing::random_batch(c, 2, 16, 4), probe = testing::random_batch(c, 2, 16, 5);
  tensor::Context ctx({.threads = 2, .precision = tensor::Precision::kBf16});
  Model m(c, Shard::full(c), ctx);
  m.init(9);
  AdamWConfig cfg;
  cfg.lr = 1e-2f;
  AdamW opt(cfg, m.layout());
  const auto probe_loss = [&](Model& model) { return model.forward(probe.view()).sum; };
  const auto fresh_loss = [&] {
    tensor::Context fresh_ctx({.threads = 2, .precision = tensor::Precision::kBf16});
    Model fresh(c, Shard::full(c), fresh_ctx);
    std::ranges::copy(std::as_const(m).params(), fresh.params().begin());
    return probe_loss(fresh);
  };
  for (int step = 0; step < 3; ++step) {
    m.zero_grad();
    m.forward(train.view());
    m.backward();
    ASSERT_FALSE(m.params_for_update().rounded.empty()) << "step " << step << ": the fused update is not taken";
    opt.step(m, cfg.lr);
    ASSERT_EQ(probe_loss(m), fresh_loss()) << "step " << step;
  }
  // A copy left stale: the weights change, the copy does not.
  for (float& w : m.params_for_update().params) w *= 2.0f;
  EXPECT_NE(probe_loss(m), fresh_loss());
  // Taking params() for writing makes the next pass round them again.
  m.params();
  EXPECT_TRUE(m.params_for_update().rounded.empty());
  EXPECT_EQ(probe_loss(m), fresh_loss());

  tensor::Context fp32_ctx({2});
  Model fp32(c, Shard::full(c), fp32_ctx);
  fp32.forward(probe.view());
  EXPECT_TRUE(fp32.params_for_update().rounded.empty()) << "fp32 GEMMs keep no bf16 copy";
}

TEST(AdamW, RejectsBadSettingsNamingTheField) {
  AdamWConfig cfg;
  cfg.beta2 = 1.0f;
  try {
    cfg.validate();
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("beta2"), std::string::npos);
  }
}

}  // namespace
}  // namespace ntp::model
