// llama2.c checkpoints: bit-exact round trips (separate and shared
// classifier), malformed headers rejected naming the field, and the model
// reading one computes what llama2.c's run.c computes from the same file
// (an independent transcription of run.c's forward pass, below).
#include "model/llama2c_checkpoint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "model/model.h"
#include "model/model_file.h"
#include "model/parameters.h"
#include "model_test_util.h"
#include "file_test_util.h"

namespace ntp::model {
namespace {

namespace fs = std::filesystem;

// 12 query heads over 4 KV heads, SwiGLU width 97, no padding rows.
GptConfig llama2c_test_config() {
  GptConfig c = testing::llama_test_config();
  c.padded_vocab = c.vocab;
  return c;
}

class Llama2cCheckpoint : public ::testing::Test {
 protected:
  Llama2cCheckpoint() : dir_(fs::temp_directory_path() / ("ntp-llama2c-" + std::to_string(::getpid()))) {
    fs::create_directories(dir_);
    params_.resize(static_cast<std::size_t>(parameter_count(config_)));
    std::mt19937 rng(3);
    std::normal_distribution<float> d(0.0f, 0.3f);
    for (float& p : params_) p = d(rng);
  }
  ~Llama2cCheckpoint() override { fs::remove_all(dir_); }

  std::string path(const char* name) const { return (dir_ / name).string(); }
  std::vector<char> bytes(const std::string& p) const { return testing::read_bytes(p); }
  void write_bytes(const std::string& p, const std::vector<char>& b) const { testing::write_bytes(p, b); }
  void expect_rejected(const std::string& p, const std::string& field) const {
    testing::expect_file_rejected([](const std::string& f) { return read_llama2c_checkpoint(f); }, p, field);
  }
  void share_classifier() {
    const ParameterLayout full(config_, Shard::full(config_));
    std::copy_n(params_.begin() + full["wte"].offset, full["wte"].count, params_.begin() + full["lm_head"].offset);
  }

  fs::path dir_;
  GptConfig config_ = llama2c_test_config();
  std::vector<float> params_;
};

TEST_F(Llama2cCheckpoint, WriteReadWriteRoundTripsBitExactly) {
  for (bool shared : {false, true}) {
    if (shared) share_classifier();
    write_llama2c_checkpoint(path("a.bin"), config_, params_);
    const auto a = bytes(path("a.bin"));
    std::int32_t vocab_field = 0;
    std::memcpy(&vocab_field, a.data() + 5 * 4, 4);
    EXPECT_EQ(vocab_field, shared ? config_.vocab : -config_.vocab);
    const auto ckpt = read_llama2c_checkpoint(path("a.bin"));
    EXPECT_EQ(ckpt.config, config_);
    ASSERT_EQ(ckpt.params.size(), params_.size());
    EXPECT_EQ(std::memcmp(ckpt.params.data(), params_.data(), params_.size() * 4), 0);
    write_llama2c_checkpoint(path("b.bin"), ckpt.config, ckpt.params);
    EXPECT_EQ(bytes(path("b.bin")), a);
    EXPECT_EQ(read_model_file(path("a.bin")).params, params_);  // told apart from llm.c's
  }
}

// The RoPE base and RMSNorm epsilon have no field: a file reads back with
// the defaults, and a writer that needs a self-contained file is refused.
TEST_F(Llama2cCheckpoint, TheFormatHasNoFieldForTheRopeBaseOrTheNormEpsilon) {
  GptConfig rebased = config_;
  rebased.rope_theta = 500000.0f;
  GptConfig renormed = config_;
  renormed.norm_eps = 1e-6f;
  write_llama2c_checkpoint(path("s.bin"), rebased, params_);  // a run's model.bin: its config.toml has the rest
  const auto back = read_llama2c_checkpoint(path("s.bin"));
  EXPECT_EQ(back.config.rope_theta, kDefaultRopeTheta);
  EXPECT_EQ(back.config.norm_eps, kDefaultNormEps);
  EXPECT_EQ(back.params, params_);
  EXPECT_NO_THROW(require_llama2c_defaults(config_));
  const auto refusal = [](const GptConfig& c) {
    try {
      require_llama2c_defaults(c);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refusal(rebased).find("no field for rope_theta: the model's is 5e+05, every reader of the file "
                                  "would assume 10000"), std::string::npos) << refusal(rebased);
  EXPECT_NE(refusal(renormed).find("no field for norm_eps: the model's is 1e-06"), std::string::npos)
      << refusal(renormed);
}

TEST_F(Llama2cCheckpoint, MalformedFilesAreRejectedNamingTheField) {
  write_llama2c_checkpoint(path("good.bin"), config_, params_);
  const auto good = bytes(path("good.bin"));
  const auto with_field = [&](int index, std::int32_t value) {
    auto b = good;
    std::memcpy(b.data() + index * 4, &value, 4);
    write_bytes(path("bad.bin"), b);
    return path("bad.bin");
  };
  expect_rejected(with_field(0, 0), "header[0] dim");
  expect_rejected(with_field(1, -3), "header[1] hidden_dim");
  expect_rejected(with_field(3, 7), "header[3] n_heads");     // does not divide dim 48
  expect_rejected(with_field(4, 5), "header[4] n_kv_heads");  // does not divide 12 heads
  expect_rejected(with_field(5, 0), "header[5] vocab_size");
  expect_rejected(with_field(5, config_.vocab), "size");      // claims a shared classifier
  expect_rejected(with_field(6, 0), "header[6] seq_len");
  auto truncated = good;
  truncated.resize(truncated.size() - 4);
  write_bytes(path("short.bin"), truncated);
  expect_rejected(path("short.bin"), "size");
  write_bytes(path("tiny.bin"), std::vector<char>(good.begin(), good.begin() + 10));
  expect_rejected(path("tiny.bin"), "header");
}

// The file says it is llama2.c: no magic, but a legacy header whose sizes
// match the file to the byte (shared or separate classifier). A truncated
// copy is neither format, and the error names both checks.
TEST_F(Llama2cCheckpoint, TheFileSaysItIsLlama2cAndATruncatedOneIsNeitherFormat) {
  for (bool shared : {false, true}) {
    if (shared) share_classifier();
    write_llama2c_checkpoint(path("a.bin"), config_, params_);
    const ModelFileHeader header = read_model_header(path("a.bin"));
    EXPECT_EQ(header.format, ModelFileFormat::kLlama2c);
    EXPECT_EQ(header.config, config_);
  }
  auto truncated = bytes(path("a.bin"));
  truncated.resize(truncated.size() - 4);
  write_bytes(path("short.bin"), truncated);
  const std::string why = [&] {
    try {
      read_model_header(path("short.bin"));
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  }();
  EXPECT_EQ(why.rfind(path("short.bin") + ": neither an llm.c checkpoint (header[0] magic is " +
                          std::to_string(config_.d_model) + ", expected 20240326) nor a llama2.c checkpoint (size: "
                          "file has " + std::to_string(truncated.size()) + " bytes, the header (shared classifier) "
                          "promises " + std::to_string(truncated.size() + 4) + ")", 0), 0u)
      << why;
  testing::expect_file_rejected([](const std::string& f) { return read_model_file(f); }, path("short.bin"),
                                "neither an llm.c checkpoint");
}

// A file that is neither (text, an empty file, an llm.c file whose magic was
// overwritten) is refused naming the file and both checks.
TEST_F(Llama2cCheckpoint, AFileOfNeitherFormatIsRefusedNamingBothChecks) {
  std::ofstream(path("text.bin")) << "hello, this is not a model at all\n";
  write_bytes(path("empty.bin"), {});
  write_bytes(path("two.bin"), {'a', 'b'});
  for (const char* name : {"text.bin", "empty.bin", "two.bin"}) {
    for (const char* check : {"neither an llm.c checkpoint (header[0] magic", "nor a llama2.c checkpoint ("})
      testing::expect_file_rejected([](const std::string& f) { return read_model_header(f); }, path(name), check);
  }
  testing::expect_file_rejected([](const std::string& f) { return read_model_header(f); }, path("two.bin"),
                                "(header[0] magic: the file has 2 bytes)");
  testing::expect_file_rejected([](const std::string& f) { return read_model_file(f); }, path("text.bin"),
                                "nor a llama2.c checkpoint");
}

// llama2.c's run.c forward pass over the raw file, transcribed: the logits at
// the last of `tokens`.
std::vector<float> run_c_logits(const std::vector<char>& file, const std::vector<int>& tokens) {
  std::int32_t h[7];
  std::memcpy(h, file.data(), sizeof(h));
  const int dim = h[0], hidden = h[1], L = h[2], nh = h[3], nkv = h[4], V = std::abs(h[5]), T = h[6];
  const int hs = dim / nh, kv_dim = nkv * hs, kv_mul = nh / nkv;
  const float* w = reinterpret_cast<const float*>(file.data() + sizeof(h));
  const float* emb = w;
  const float* rms_att = emb + V * dim;
  const float* wq = rms_att + L * dim;
  const float* wk = wq + L * dim * dim;
  const float* wv = wk + L * dim * kv_dim;
  const float* wo = wv + L * dim * kv_dim;
  const float* rms_ffn = wo + L * dim * dim;
  const float* w1 = rms_ffn + L * dim;
  const float* w2 = w1 + L * dim * hidden;
  const float* w3 = w2 + L * hidden * dim;
  const float* rms_final = w3 + L * dim * hidden;
  const float* wcls = h[5] > 0 ? emb : rms_final + dim + T * hs;
  const auto matmul = [](std::vector<float>& out, const std::vector<float>& x, const float* m, int n, int d) {
    out.assign(static_cast<std::size_t>(d), 0.0f);
    for (int i = 0; i < d; ++i) {
      float val = 0.0f;
      for (int j = 0; j < n; ++j) val += m[i * n + j] * x[static_cast<std::size_t>(j)];
      out[static_cast<std::size_t>(i)] = val;
    }
  };
  const auto rmsnorm = [](std::vector<float>& o, const std::vector<float>& x, const float* g) {
    float ss = 0.0f;
    for (float v : x) ss += v * v;
    ss = 1.0f / std::sqrt(ss / static_cast<float>(x.size()) + 1e-5f);
    o.resize(x.size());
    for (std::size_t j = 0; j < x.size(); ++j) o[j] = g[j] * (ss * x[j]);
  };
  std::vector<float> key_cache(static_cast<std::size_t>(L * T * kv_dim)), value_cache(key_cache.size());
  std::vector<float> x, xb, xb2, q, k, v, hb, hb2, logits;
  for (int pos = 0; pos < static_cast<int>(tokens.size()); ++pos) {
    x.assign(emb + tokens[static_cast<std::size_t>(pos)] * dim, emb + (tokens[static_cast<std::size_t>(pos)] + 1) * dim);
    for (int l = 0; l < L; ++l) {
      rmsnorm(xb, x, rms_att + l * dim);
      matmul(q, xb, wq + l * dim * dim, dim, dim);
      matmul(k, xb, wk + l * dim * kv_dim, dim, kv_dim);
      matmul(v, xb, wv + l * dim * kv_dim, dim, kv_dim);
      for (int i = 0; i < dim; i += 2) {
        const int head_dim = i % hs;
        const float freq = 1.0f / std::pow(10000.0f, static_cast<float>(head_dim) / static_cast<float>(hs));
        const float val = static_cast<float>(pos) * freq, fcr = std::cos(val), fci = std::sin(val);
        for (int r = 0; r < (i < kv_dim ? 2 : 1); ++r) {
          std::vector<float>& vec = r == 0 ? q : k;
          const float v0 = vec[static_cast<std::size_t>(i)], v1 = vec[static_cast<std::size_t>(i + 1)];
          vec[static_cast<std::size_t>(i)] = v0 * fcr - v1 * fci;
          vec[static_cast<std::size_t>(i + 1)] = v0 * fci + v1 * fcr;
        }
      }
      std::copy(k.begin(), k.end(), key_cache.begin() + (l * T + pos) * kv_dim);
      std::copy(v.begin(), v.end(), value_cache.begin() + (l * T + pos) * kv_dim);
      xb.assign(static_cast<std::size_t>(dim), 0.0f);
      for (int hh = 0; hh < nh; ++hh) {
        std::vector<float> att(static_cast<std::size_t>(pos + 1));
        float max = -1e30f, sum = 0.0f;
        for (int t = 0; t <= pos; ++t) {
          const float* kt = key_cache.data() + (l * T + t) * kv_dim + (hh / kv_mul) * hs;
          float score = 0.0f;
          for (int i = 0; i < hs; ++i) score += q[static_cast<std::size_t>(hh * hs + i)] * kt[i];
          att[static_cast<std::size_t>(t)] = score / std::sqrt(static_cast<float>(hs));
          max = std::max(max, att[static_cast<std::size_t>(t)]);
        }
        for (float& a : att) sum += (a = std::exp(a - max));
        for (int t = 0; t <= pos; ++t) {
          const float* vt = value_cache.data() + (l * T + t) * kv_dim + (hh / kv_mul) * hs;
          for (int i = 0; i < hs; ++i) xb[static_cast<std::size_t>(hh * hs + i)] += att[static_cast<std::size_t>(t)] / sum * vt[i];
        }
      }
      matmul(xb2, xb, wo + l * dim * dim, dim, dim);
      for (int i = 0; i < dim; ++i) x[static_cast<std::size_t>(i)] += xb2[static_cast<std::size_t>(i)];
      rmsnorm(xb, x, rms_ffn + l * dim);
      matmul(hb, xb, w1 + l * dim * hidden, dim, hidden);
      matmul(hb2, xb, w3 + l * dim * hidden, dim, hidden);
      for (int i = 0; i < hidden; ++i) {
        float& a = hb[static_cast<std::size_t>(i)];
        a = a * (1.0f / (1.0f + std::exp(-a))) * hb2[static_cast<std::size_t>(i)];
      }
      matmul(xb, hb, w2 + l * dim * hidden, hidden, dim);
      for (int i = 0; i < dim; ++i) x[static_cast<std::size_t>(i)] += xb[static_cast<std::size_t>(i)];
    }
    rmsnorm(xb, x, rms_final);
    matmul(logits, xb, wcls, dim, V);
  }
  return logits;
}

std::vector<float> softmax(const std::vector<float>& logits) {
  const float max = *std::max_element(logits.begin(), logits.end());
  std::vector<float> p(logits.size());
  double sum = 0.0;
  for (std::size_t i = 0; i < p.size(); ++i) sum += (p[i] = std::exp(logits[i] - max));
  for (float& x : p) x = static_cast<float>(x / sum);
  return p;
}

// Probabilities agree to 1e-5 absolute (fp32 of both, different summation
// orders; probabilities here are ~1/61). The same comparison against a model
// with its RoPE pairs read half-split (a q/k permutation applied) fails.
TEST_F(Llama2cCheckpoint, ComputesWhatRunCComputesFromTheSameFile) {
  for (bool shared : {false, true}) {
    if (shared) share_classifier();
    write_llama2c_checkpoint(path("m.bin"), config_, params_);
    const auto file = bytes(path("m.bin"));
    const auto ckpt = read_llama2c_checkpoint(path("m.bin"));
    tensor::Context ctx({1});
    Model m(ckpt.config, Shard::full(ckpt.config), ctx);
    m.load_full(ckpt.params);
    const std::vector<int> tokens = {5, 17, 3, 60, 0, 42, 8};
    const std::vector<std::int32_t> ids(tokens.begin(), tokens.end());
    const std::vector<float> want = softmax(run_c_logits(file, tokens));
    const std::vector<float> got = m.next_token_probs(ids);
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << "token " << i;
    // Broken variant: swap the halves of every query/key head's pairs (as a
    // half-split convention would read them) on layer 0.
    const ParameterLayout full(config_, Shard::full(config_));
    auto qkv = m.param("h0.qkv_w");
    const std::int64_t C = config_.d_model, hd = config_.head_dim(), g = config_.queries_per_group();
    for (std::int64_t gr = 0; gr < config_.kv_heads; ++gr)
      for (std::int64_t hh = 0; hh < g + 1; ++hh)
        for (std::int64_t r = 1; r < hd / 2; r += 2)  // swap rows 1 and hd/2 + ... (a permutation)
          std::swap_ranges(qkv.begin() + ((gr * (g + 2) + hh) * hd + r) * C,
                           qkv.begin() + ((gr * (g + 2) + hh) * hd + r + 1) * C,
                           qkv.begin() + ((gr * (g + 2) + hh) * hd + hd / 2 + r) * C);
    const std::vector<float> wrong = m.next_token_probs(ids);
    float worst = 0.0f;
    for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(wrong[i] - want[i]));
    EXPECT_GT(worst, 1e-5f);
  }
}

}  // namespace
}  // namespace ntp::model
