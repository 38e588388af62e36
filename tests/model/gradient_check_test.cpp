// Backward against central finite differences on a tiny model (TP = 1, fp32).
//
// Tolerance: the loss is ~log(61) = 4.1, computed in fp32, so each evaluation
// carries a rounding error of about 1e-6 (a few ulps through the network);
// with step h = 1e-2 the central difference has noise ~1e-6 / (2h) = 5e-5 and
// a truncation error h^2/6 * f''' of order 1e-5 for these weights. We
// therefore accept |fd - g| <= 5e-4 + 2e-2 |g|, and also require the
// directional derivative along a random direction of each tensor to agree
// within 2 % -- large enough for the noise, far below any real bug (a missing
// term or a wrong transpose changes gradients by O(1)).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "model/model.h"
#include "model/optimizer.h"
#include "tensor/attention.h"
#include "model_test_util.h"

namespace ntp::model {
namespace {

double loss_of(Model& m, const Batch& b) { return m.forward(b).mean(); }

// "gpt2", "llama", or "llama_settings" (a non-default RoPE base and RMSNorm epsilon).
GptConfig test_config(const std::string& name) {
  if (name == "llama") return testing::llama_test_config();
  if (name == "llama_settings") return testing::llama_settings_test_config();
  return testing::small_test_config();
}

GptConfig with_positions(GptConfig c, std::int64_t seq) {
  c.max_seq = std::max(c.max_seq, seq);
  return c;
}

class GradientCheck : public ::testing::TestWithParam<std::string> {
 protected:
  explicit GradientCheck(std::int64_t seq = 5)
      : config_(with_positions(test_config(GetParam()), seq)), model_(config_, Shard::full(config_), ctx_) {
    model_.init(11);
    // GPT-2's 0.02 init makes most gradients tiny; widen the weights so every
    // path carries signal.
    for (const TensorSpec& t : model_.layout().tensors()) {
      auto p = model_.param(t.name);
      std::mt19937 rng(static_cast<std::uint32_t>(t.offset));
      std::normal_distribution<float> noise(0.0f, 0.1f);
      for (float& x : p) x = x + noise(rng);
    }
    batch_ = testing::random_batch(config_, 2, seq, 3);
    model_.zero_grad();
    model_.forward(batch_.view());
    model_.backward();
    grads_.assign(model_.grads().begin(), model_.grads().end());
  }

  double central_difference(std::span<float> p, std::size_t i, float h) {
    const float saved = p[i];
    p[i] = saved + h;
    const double plus = loss_of(model_, batch_.view());
    p[i] = saved - h;
    const double minus = loss_of(model_, batch_.view());
    p[i] = saved;
    return (plus - minus) / (2.0 * h);
  }

  void expect_directional_derivatives_match();

  tensor::Context ctx_{{2}};
  GptConfig config_;
  Model model_;
  testing::TokenBatch batch_;
  std::vector<float> grads_;
};

TEST_P(GradientCheck, ElementsMatchFiniteDifferences) {
  std::mt19937 rng(5);
  for (const TensorSpec& t : model_.layout().tensors()) {
    auto p = model_.param(t.name);
    // The largest-gradient element plus a few random ones.
    std::size_t largest = 0;
    for (std::size_t i = 0; i < p.size(); ++i)
      if (std::abs(grads_[t.offset + i]) > std::abs(grads_[t.offset + largest])) largest = i;
    std::vector<std::size_t> picks{largest};
    std::uniform_int_distribution<std::size_t> any(0, p.size() - 1);
    for (int k = 0; k < 4; ++k) picks.push_back(any(rng));
    for (std::size_t i : picks) {
      const double g = grads_[static_cast<std::size_t>(t.offset) + i];
      const double fd = central_difference(p, i, 1e-2f);
      EXPECT_NEAR(fd, g, 5e-4 + 2e-2 * std::abs(g)) << t.name << "[" << i << "]";
    }
  }
}

void GradientCheck::expect_directional_derivatives_match() {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal;
  for (const TensorSpec& t : model_.layout().tensors()) {
    auto p = model_.param(t.name);
    std::vector<float> dir(p.size()), saved(p.begin(), p.end());
    double norm = 0.0;
    for (float& d : dir) {
      d = normal(rng);
      norm += static_cast<double>(d) * d;
    }
    double analytic = 0.0;
    for (std::size_t i = 0; i < p.size(); ++i) {
      dir[i] /= static_cast<float>(std::sqrt(norm));
      analytic += dir[i] * grads_[static_cast<std::size_t>(t.offset) + i];
    }
    const float h = 1e-2f;
    for (std::size_t i = 0; i < p.size(); ++i) p[i] = saved[i] + h * dir[i];
    const double plus = loss_of(model_, batch_.view());
    for (std::size_t i = 0; i < p.size(); ++i) p[i] = saved[i] - h * dir[i];
    const double minus = loss_of(model_, batch_.view());
    std::copy(saved.begin(), saved.end(), p.begin());
    const double fd = (plus - minus) / (2.0 * h);
    EXPECT_NEAR(fd, analytic, 5e-4 + 2e-2 * std::abs(analytic)) << t.name;
  }
}

TEST_P(GradientCheck, DirectionalDerivativesMatchPerTensor) { expect_directional_derivatives_match(); }

TEST_P(GradientCheck, PaddingRowsGetNoGradient) {
  for (const char* name : {"wte", "lm_head"}) {
    const TensorSpec* t = model_.layout().find(name);
    if (t == nullptr) continue;  // GPT-2 ties the head to wte
    for (std::int64_t row = config_.vocab; row < config_.padded_vocab; ++row)
      for (std::int64_t j = 0; j < config_.d_model; ++j)
        EXPECT_EQ(grads_[static_cast<std::size_t>(t->offset + row * config_.d_model + j)], 0.0f) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, GradientCheck, ::testing::Values("gpt2", "llama", "llama_settings"),
                         [](const auto& name) { return name.param; });

// The settings reach the kernels: the same weights give another loss.
TEST(LlamaSettings, ChangeTheLoss) {
  tensor::Context ctx({1});
  const auto loss = [&](const GptConfig& c) {
    Model m(c, Shard::full(c), ctx);
    m.init(3);
    return loss_of(m, testing::random_batch(c, 2, 8, 4).view());
  };
  GptConfig theta_only = testing::llama_test_config(), eps_only = theta_only;
  theta_only.rope_theta = testing::llama_settings_test_config().rope_theta;
  eps_only.norm_eps = testing::llama_settings_test_config().norm_eps;
  const double base = loss(testing::llama_test_config());
  EXPECT_NE(loss(theta_only), base);
  EXPECT_NE(loss(eps_only), base);
}

// At 36 positions attention runs through GEMM per head (attention_path_for),
// in two row blocks; at 5 it runs its loops.
class GemmAttentionGradientCheck : public GradientCheck {
 protected:
  GemmAttentionGradientCheck() : GradientCheck(36) {}
};

TEST_P(GemmAttentionGradientCheck, DirectionalDerivativesMatchPerTensor) {
  ASSERT_EQ(tensor::attention_path_for({2, 36, 1, 4, 1}), tensor::AttentionPath::kGemm);
  ASSERT_EQ(tensor::attention_path_for({2, 5, 1, 4, 1}), tensor::AttentionPath::kLoops);
  expect_directional_derivatives_match();
}

INSTANTIATE_TEST_SUITE_P(Families, GemmAttentionGradientCheck, ::testing::Values("gpt2", "llama"),
                         [](const auto& name) { return name.param; });

class Training : public ::testing::TestWithParam<Family> {};

TEST_P(Training, LossFallsOnARepeatedBatch) {
  tensor::Context ctx({2});
  const GptConfig c = test_config(to_string(GetParam()));
  Model m(c, Shard::full(c), ctx);
  m.init(1);
  AdamWConfig opt_config;
  opt_config.lr = 1e-2f;
  AdamW opt(opt_config, m.layout());
  const auto batch = testing::random_batch(c, 2, 8, 4);
  double first = 0.0, last = 0.0;
  for (int step = 0; step < 20; ++step) {
    m.zero_grad();
    const double loss = m.forward(batch.view()).mean();
    m.backward();
    opt.step(m, opt_config.lr);
    if (step == 0) first = loss;
    last = loss;
  }
  EXPECT_NEAR(first, std::log(61.0), 0.2);  // near-uniform predictions at init
  EXPECT_LT(last, 0.5 * first);
}

INSTANTIATE_TEST_SUITE_P(Families, Training, ::testing::Values(Family::kGpt2, Family::kLlama),
                         [](const auto& family) { return std::string(to_string(family.param)); });

}  // namespace
}  // namespace ntp::model
