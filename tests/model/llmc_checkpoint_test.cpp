#include "model/llmc_checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "model/model_file.h"
#include "model/parameters.h"
#include "model_test_util.h"
#include "file_test_util.h"

namespace ntp::model {
namespace {

namespace fs = std::filesystem;

class LlmcCheckpoint : public ::testing::Test {
 protected:
  LlmcCheckpoint() : dir_(fs::temp_directory_path() / ("ntp-llmc-" + std::to_string(::getpid()))) {
    fs::create_directories(dir_);
    config_ = testing::small_test_config();
    params_.resize(static_cast<std::size_t>(parameter_count(config_)));
    std::mt19937 rng(3);
    std::normal_distribution<float> d;
    for (float& p : params_) p = d(rng);
  }
  ~LlmcCheckpoint() override { fs::remove_all(dir_); }

  std::string path(const char* name) const { return (dir_ / name).string(); }
  std::vector<char> bytes(const std::string& p) const { return testing::read_bytes(p); }
  void write_bytes(const std::string& p, const std::vector<char>& b) const { testing::write_bytes(p, b); }
  void expect_rejected(const std::string& p, const std::string& field) const {
    testing::expect_file_rejected([](const std::string& f) { return read_llmc_checkpoint(f); }, p, field);
  }

  fs::path dir_;
  GptConfig config_;
  std::vector<float> params_;
};

TEST_F(LlmcCheckpoint, WriteReadRoundTripsBitExactly) {
  write_llmc_checkpoint(path("a.bin"), config_, params_);
  const auto ckpt = read_llmc_checkpoint(path("a.bin"));
  EXPECT_EQ(ckpt.config, config_);
  ASSERT_EQ(ckpt.params.size(), params_.size());
  EXPECT_EQ(std::memcmp(ckpt.params.data(), params_.data(), params_.size() * 4), 0);
  write_llmc_checkpoint(path("b.bin"), ckpt.config, ckpt.params);
  EXPECT_EQ(bytes(path("a.bin")), bytes(path("b.bin")));
}

TEST_F(LlmcCheckpoint, UsesLlmcOrderForQkvAndTransposedProjections) {
  const ParameterLayout full(config_, Shard::full(config_));
  const std::vector<float> llmc = to_llmc_order(config_, params_);
  const std::int64_t C = config_.d_model, hd = config_.head_dim(), Vp = config_.padded_vocab;
  const std::int64_t T = config_.max_seq, L = config_.layers;
  // qkvw of layer 0 starts after wte, wpe, ln1w, ln1b. llm.c row C + 5 is
  // k row 1 of head 1 (hd = 4); in the unit-major layout that is
  // head 1 (offset 3*hd rows) + k (hd rows) + row 1.
  const std::int64_t qkvw = Vp * C + T * C + 2 * L * C;
  const std::int64_t ours_row = 1 * 3 * hd + hd + 1;
  EXPECT_EQ(llmc[static_cast<std::size_t>(qkvw + (C + 5) * C + 2)],
            params_[static_cast<std::size_t>(full["h0.qkv_w"].offset + ours_row * C + 2)]);
  // attprojw of layer 0: llm.c [out=3][in=7] is proj_wt [in=7][out=3].
  const std::int64_t attprojw = qkvw + L * 3 * C * C + L * 3 * C;
  EXPECT_EQ(llmc[static_cast<std::size_t>(attprojw + 3 * C + 7)],
            params_[static_cast<std::size_t>(full["h0.proj_wt"].offset + 7 * C + 3)]);
  EXPECT_EQ(from_llmc_order(config_, llmc), params_);
}

TEST_F(LlmcCheckpoint, TheHeaderAloneGivesTheModelAndChecksTheSize) {
  write_llmc_checkpoint(path("a.bin"), config_, params_);
  EXPECT_EQ(read_llmc_config(path("a.bin")), config_);
  const std::vector<char> good = bytes(path("a.bin"));
  write_bytes(path("short.bin"), std::vector<char>(good.begin(), good.end() - 4));
  EXPECT_THROW(read_llmc_config(path("short.bin")), std::runtime_error);
}

// The file says it is llm.c (header[0] is the magic): read_model_header
// needs no family. A truncated copy is still llm.c, refused as a truncated
// llm.c file; with the magic overwritten it is neither format, and the error
// names both checks.
TEST_F(LlmcCheckpoint, TheFileSaysItIsLlmcAndATruncatedOneIsRefusedAsSuch) {
  write_llmc_checkpoint(path("a.bin"), config_, params_);
  const ModelFileHeader header = read_model_header(path("a.bin"));
  EXPECT_EQ(header.format, ModelFileFormat::kLlmc);
  EXPECT_EQ(header.config, config_);
  EXPECT_EQ(read_model_file(path("a.bin")).params, params_);
  const std::vector<char> good = bytes(path("a.bin"));
  write_bytes(path("short.bin"), std::vector<char>(good.begin(), good.end() - 4));
  const auto header_of = [](const std::string& f) { return read_model_header(f); };
  testing::expect_file_rejected(header_of, path("short.bin"), "parameters: truncated");
  write_bytes(path("header.bin"), std::vector<char>(good.begin(), good.begin() + 100));
  testing::expect_file_rejected(header_of, path("header.bin"), "checkpoint header: truncated");
  std::vector<char> unmarked = good;
  const std::int32_t ninety_six = 96;
  std::memcpy(unmarked.data(), &ninety_six, 4);
  write_bytes(path("unmarked.bin"), unmarked);
  testing::expect_file_rejected(header_of, path("unmarked.bin"),
                                "neither an llm.c checkpoint (header[0] magic is 96, expected 20240326) nor a "
                                "llama2.c checkpoint (header");
}

TEST_F(LlmcCheckpoint, RejectsMalformedFilesNamingFileAndField) {
  write_llmc_checkpoint(path("good.bin"), config_, params_);
  const std::vector<char> good = bytes(path("good.bin"));
  auto with_int = [&](std::size_t index, std::int32_t value) {
    std::vector<char> b = good;
    std::memcpy(b.data() + index * 4, &value, 4);
    return b;
  };
  write_bytes(path("magic.bin"), with_int(0, 1234));
  expect_rejected(path("magic.bin"), "header[0] magic");
  write_bytes(path("version.bin"), with_int(1, 5));
  expect_rejected(path("version.bin"), "header[1] version");
  write_bytes(path("heads.bin"), with_int(5, 0));
  expect_rejected(path("heads.bin"), "header[5] heads");
  write_bytes(path("vp.bin"), with_int(7, 10));
  expect_rejected(path("vp.bin"), "padded_vocab");
  write_bytes(path("short.bin"), std::vector<char>(good.begin(), good.end() - 4));
  expect_rejected(path("short.bin"), "parameters");
  write_bytes(path("header.bin"), std::vector<char>(good.begin(), good.begin() + 100));
  expect_rejected(path("header.bin"), "checkpoint header");
  std::vector<char> longer = good;
  longer.push_back(0);
  write_bytes(path("long.bin"), longer);
  expect_rejected(path("long.bin"), "parameters");
  expect_rejected(path("missing.bin"), "file");
}

// Header fields are untrusted int32s: sizes whose exact parameter count
// overflows 64 bits (here to 2^62 floats, whose byte count wraps to exactly
// the header size) must be rejected naming the file, not allocated.
TEST_F(LlmcCheckpoint, RejectsHeaderWhoseParameterCountOverflows) {
  std::vector<std::int32_t> header(256, 0);
  header[0] = kLlmcCheckpointMagic;
  header[1] = kLlmcCheckpointVersion;
  header[2] = (1 << 30) - 7 + (1 << 30) - 7;  // max_seq = 2^31 - 14
  header[3] = 1;                              // vocab
  header[4] = 1;                              // layers
  header[5] = 1;                              // heads
  header[6] = 1 << 30;                        // channels
  header[7] = 0x7fffffff;                     // padded_vocab
  std::vector<char> b(header.size() * 4);
  std::memcpy(b.data(), header.data(), b.size());
  write_bytes(path("huge.bin"), b);
  expect_rejected(path("huge.bin"), "header");
}

}  // namespace
}  // namespace ntp::model
