// The step's shortcuts give the bits of the plain path: a lazy zero_grad (the
// next backward overwrites the gradients) and activations reused across
// micro-batch sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "model/model.h"
#include "model_test_util.h"

namespace ntp::model {
namespace {

std::vector<float> copy_of(std::span<const float> s) { return {s.begin(), s.end()}; }

class ModelStep : public ::testing::Test {
 protected:
  GptConfig c_ = testing::small_test_config();
  tensor::Context ctx_{{2}};
  testing::TokenBatch four_ = testing::random_batch(c_, 4, 16, 1);
  testing::TokenBatch two_ = testing::random_batch(c_, 2, 16, 2);

  std::unique_ptr<Model> fresh() {
    auto m = std::make_unique<Model>(c_, Shard::full(c_), ctx_);
    m->init(5);
    return m;
  }
};

TEST_F(ModelStep, LazyZeroGradGivesTheBitsOfAClearedBuffer) {
  auto lazy = fresh(), eager = fresh();
  // Old gradients the lazy path must not leak: NaN anywhere would survive an add.
  for (float& g : lazy->grads()) g = std::numeric_limits<float>::quiet_NaN();
  lazy->zero_grad();
  eager->zero_grad();
  for (float g : eager->grads()) ASSERT_EQ(g, 0.0f);  // reading settles the clear
  for (Model* m : {lazy.get(), eager.get()}) {
    m->forward(four_.view());
    m->backward();
    m->forward(two_.view());  // a second micro-batch accumulates
    m->backward();
  }
  const auto want = copy_of(eager->grads());
  const auto got = copy_of(lazy->grads());
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << i;
  double norm = 0.0;
  for (float g : got) norm += static_cast<double>(g) * g;
  EXPECT_GT(norm, 0.0);
}

TEST_F(ModelStep, ZeroGradWithoutBackwardReadsAsZero) {
  auto m = fresh();
  m->forward(four_.view());
  m->backward();
  m->zero_grad();
  for (float g : m->grads()) ASSERT_EQ(g, 0.0f);
}

TEST_F(ModelStep, ASmallerMicroBatchReusesTheActivationsWithTheSameResult) {
  auto reused = fresh(), sized = fresh();
  reused->zero_grad();
  reused->forward(four_.view());  // sizes the activations for 4 sequences
  reused->backward();
  reused->zero_grad();
  const double loss = reused->forward(two_.view()).sum;
  reused->backward();
  sized->zero_grad();
  EXPECT_EQ(sized->forward(two_.view()).sum, loss);
  sized->backward();
  EXPECT_EQ(copy_of(reused->grads()), copy_of(sized->grads()));
}

}  // namespace
}  // namespace ntp::model
