#include "model/generate.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <unistd.h>

#include <gtest/gtest.h>

#include "model/tokenizer.h"
#include "tests/model/model_test_util.h"

namespace ntp::model {
namespace {

TEST(Generate, NextTokenProbabilitiesAreTheLossesDistribution) {
  const GptConfig c = testing::small_test_config();
  tensor::Context ctx({1});
  Model model(c, Shard::full(c), ctx);
  model.init(7);
  const std::vector<std::int32_t> context = {3, 14, 15, 9, 26};
  const std::vector<float> probs = model.next_token_probs(context);
  ASSERT_EQ(static_cast<std::int64_t>(probs.size()), c.vocab);
  EXPECT_NEAR(std::accumulate(probs.begin(), probs.end(), 0.0), 1.0, 1e-5);
  // -log p(t) is the loss forward() gives the last position for target t.
  for (const std::int32_t t : {0, 5, 60}) {
    std::vector<std::int32_t> targets = {14, 15, 9, 26, t};
    Model fresh(c, Shard::full(c), ctx);
    std::copy(model.params().begin(), model.params().end(), fresh.params().begin());
    std::vector<std::int32_t> first(context.begin(), context.end() - 1);
    std::vector<std::int32_t> first_targets(targets.begin(), targets.end() - 1);
    const double all = fresh.forward({context.data(), targets.data(), 1, 5}).sum;
    const double head = fresh.forward({first.data(), first_targets.data(), 1, 4}).sum;
    EXPECT_NEAR(-std::log(probs[static_cast<std::size_t>(t)]), all - head, 1e-4) << t;
  }
}

TEST(Generate, PickTokenFollowsTheTemperature) {
  const std::vector<float> probs = {0.1f, 0.6f, 0.3f};
  EXPECT_EQ(pick_token(probs, 0.0, 0.99), 1);  // argmax whatever the draw
  EXPECT_EQ(pick_token(probs, 1.0, 0.05), 0);
  EXPECT_EQ(pick_token(probs, 1.0, 0.5), 1);
  EXPECT_EQ(pick_token(probs, 1.0, 0.95), 2);
  // A low temperature sharpens: 0.6^10 dominates, so a draw of 0.95 still picks token 1.
  EXPECT_EQ(pick_token(probs, 0.1, 0.95), 1);
  const std::vector<float> tie = {0.5f, 0.5f};
  EXPECT_EQ(pick_token(tie, 0.0, 0.7), 0);
}

TEST(Generate, TokenizerDecodesLlmcFiles) {
  const std::string path = ::testing::TempDir() + "ntp_tokenizer_" + std::to_string(::getpid()) + ".bin";
  std::vector<std::int32_t> header(256, 0);
  header[0] = kTokenizerMagic;
  header[1] = 2;
  header[2] = 3;
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
    for (const std::string piece : {"Hello", ",", " world"}) {
      out.put(static_cast<char>(piece.size()));
      out << piece;
    }
  }
  const Tokenizer t = Tokenizer::read(path);
  const std::vector<std::int32_t> ids = {0, 1, 2};
  EXPECT_EQ(t.decode(ids), "Hello, world");
  const std::vector<std::int32_t> bad = {3};
  EXPECT_THROW(t.decode(bad), std::out_of_range);
  header[0] = 1;
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
  }
  EXPECT_THROW(Tokenizer::read(path), std::runtime_error);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace ntp::model
