#include "model/token_data.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace ntp::model {
namespace {

namespace fs = std::filesystem;

class TokenFiles : public ::testing::Test {
 protected:
  TokenFiles() : dir_(fs::temp_directory_path() / ("ntp-tokens-" + std::to_string(::getpid()))) {
    fs::create_directories(dir_);
  }
  ~TokenFiles() override { fs::remove_all(dir_); }
  std::string path(const char* name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(TokenFiles, RoundTripAndLlmcSequentialOrder) {
  std::vector<std::uint16_t> tokens(101);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint16_t>(i * 600);
  TokenData::write_token_file(path("t.bin"), tokens);
  const TokenData data = TokenData::read_token_file(path("t.bin"));
  ASSERT_EQ(data.size(), 101);
  EXPECT_TRUE(std::equal(tokens.begin(), tokens.end(), data.tokens().begin()));
  EXPECT_EQ(data.max_token(), 60000);
  // B = 2, T = 5: batch i covers tokens [10 i, 10 i + 11).
  EXPECT_EQ(data.sequential_batches(2, 5), 10);
  std::vector<std::int32_t> in(10), tg(10);
  data.sequential_batch(3, 2, 5, in.data(), tg.data());
  for (int k = 0; k < 10; ++k) {
    EXPECT_EQ(in[k], (30 + k) * 600);
    EXPECT_EQ(tg[k], (31 + k) * 600);
  }
  EXPECT_THROW(data.sequential_batch(10, 2, 5, in.data(), tg.data()), std::out_of_range);
  // Sample 7 of length 5: tokens [35, 41).
  EXPECT_EQ(data.samples(5), 20);
  data.sample(7, 5, in.data(), tg.data());
  EXPECT_EQ(in[0], 35 * 600);
  EXPECT_EQ(tg[4], 40 * 600);
  EXPECT_THROW(data.sample(20, 5, in.data(), tg.data()), std::out_of_range);
  // A zero or negative shape is an error naming the file, not a division by zero.
  EXPECT_THROW(data.sequential_batches(0, 5), std::invalid_argument);
  EXPECT_THROW(data.sequential_batches(2, -1), std::invalid_argument);
  EXPECT_THROW(data.sequential_batch(0, 2, 0, in.data(), tg.data()), std::invalid_argument);
  EXPECT_THROW(data.samples(0), std::invalid_argument);
  EXPECT_THROW(data.sample(0, 0, in.data(), tg.data()), std::invalid_argument);
}

TEST_F(TokenFiles, TextIsReadAsBytes) {
  std::ofstream(path("x.txt"), std::ios::binary) << "hi\xff";
  const TokenData data = TokenData::read_text_bytes(path("x.txt"));
  ASSERT_EQ(data.size(), 3);
  EXPECT_EQ(data.tokens()[0], 'h');
  EXPECT_EQ(data.tokens()[2], 255);
}

TEST_F(TokenFiles, NanoGptRawUint16) {
  const std::vector<std::uint16_t> tokens{1, 50256, 7};
  std::ofstream(path("raw.bin"), std::ios::binary)
      .write(reinterpret_cast<const char*>(tokens.data()), 6);
  const TokenData data = TokenData::read_raw_uint16(path("raw.bin"));
  EXPECT_TRUE(std::equal(tokens.begin(), tokens.end(), data.tokens().begin(), data.tokens().end()));
  std::ofstream(path("odd.bin"), std::ios::binary) << "abc";
  EXPECT_THROW(TokenData::read_raw_uint16(path("odd.bin")), std::runtime_error);
}

TEST_F(TokenFiles, RejectsMalformedFilesNamingFileAndField) {
  std::vector<std::uint16_t> tokens(10, 7);
  TokenData::write_token_file(path("good.bin"), tokens);
  std::ifstream in(path("good.bin"), std::ios::binary);
  const std::vector<char> good{std::istreambuf_iterator<char>(in), {}};
  const auto expect_rejected = [&](const char* name, std::vector<char> b, const char* field) {
    std::ofstream(path(name), std::ios::binary).write(b.data(), static_cast<std::streamsize>(b.size()));
    try {
      TokenData::read_token_file(path(name));
      ADD_FAILURE() << name << " accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(path(name)), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  std::vector<char> bad = good;
  bad[0] = 1;
  expect_rejected("magic.bin", bad, "header[0] magic");
  bad = good;
  bad[4] = 9;
  expect_rejected("version.bin", bad, "header[1] version");
  expect_rejected("short.bin", std::vector<char>(good.begin(), good.end() - 2), "header[2] count");
  expect_rejected("header.bin", std::vector<char>(good.begin(), good.begin() + 12), "token file header");
}

TEST_F(TokenFiles, LlmcVersion2HoldsUint32Tokens) {
  const std::vector<std::uint32_t> tokens{1, 70000, 128255, 3};
  TokenData::write_token_file(path("v2.bin"), std::span<const std::uint32_t>(tokens));
  for (const TokenFormat format : {TokenFormat::kAuto, TokenFormat::kLlmc}) {
    const TokenData data = TokenData::read(path("v2.bin"), format);
    EXPECT_TRUE(std::equal(tokens.begin(), tokens.end(), data.tokens().begin(), data.tokens().end()));
    EXPECT_EQ(data.max_token(), 128255);
  }
}

TEST_F(TokenFiles, AutoDetectionNeverReadsABinAsText) {
  const std::vector<std::uint16_t> tokens{5, 50256, 7, 9};
  TokenData::write_token_file(path("llmc.bin"), tokens);
  std::ofstream(path("raw.bin"), std::ios::binary).write(reinterpret_cast<const char*>(tokens.data()), 8);
  std::ofstream(path("odd.bin"), std::ios::binary) << "abc";
  std::ofstream(path("notes.txt"), std::ios::binary) << "abc";
  EXPECT_EQ(TokenData::read(path("llmc.bin"), TokenFormat::kAuto).size(), 4);
  const TokenData raw = TokenData::read(path("raw.bin"), TokenFormat::kAuto);
  EXPECT_TRUE(std::equal(tokens.begin(), tokens.end(), raw.tokens().begin(), raw.tokens().end()));
  EXPECT_EQ(TokenData::read(path("notes.txt"), TokenFormat::kAuto).size(), 3);  // bytes
  EXPECT_EQ(TokenData::read(path("odd.bin"), TokenFormat::kText).size(), 3);     // asked for
  const auto expect_rejected = [&](const char* name, const char* why) {
    try {
      TokenData::read(path(name), TokenFormat::kAuto);
      ADD_FAILURE() << name << " accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(path(name)), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  expect_rejected("odd.bin", "no token file");
  // An llm.c header with a wrong magic is a broken llm.c file, not nanoGPT tokens.
  std::ifstream in(path("llmc.bin"), std::ios::binary);
  std::vector<char> bytes{std::istreambuf_iterator<char>(in), {}};
  bytes[0] = 1;
  std::ofstream(path("magic.bin"), std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  expect_rejected("magic.bin", "wrong magic");
}

TEST(TokenFormatDetection, DecidesByMagicExtensionAndSize) {
  const std::int32_t llmc[3] = {kTokenFileMagic, 1, 10};
  const std::int32_t other[3] = {1, 2, 3};
  EXPECT_EQ(detect_token_format("a.txt", 1044, llmc), TokenFormat::kLlmc);
  EXPECT_EQ(detect_token_format("a.bin", 1044, llmc), TokenFormat::kLlmc);
  EXPECT_EQ(detect_token_format("a.bin", 12, other), TokenFormat::kNanogpt);
  EXPECT_EQ(detect_token_format("a.txt", 12, other), TokenFormat::kText);
  EXPECT_EQ(detect_token_format("a.bin.txt", 13, other), TokenFormat::kText);
  EXPECT_THROW(detect_token_format("a.bin", 13, other), std::runtime_error);
  EXPECT_THROW(detect_token_format("a.bin", 2, {}), std::runtime_error);
  const std::int32_t shaped_v1[3] = {7, 1, 10};  // 1024 + 10 x 2 bytes
  const std::int32_t shaped_v2[3] = {7, 2, 10};  // 1024 + 10 x 4 bytes
  EXPECT_THROW(detect_token_format("a.bin", 1044, shaped_v1), std::runtime_error);
  EXPECT_THROW(detect_token_format("a.bin", 1064, shaped_v2), std::runtime_error);
  EXPECT_EQ(detect_token_format("a.bin", 1046, shaped_v1), TokenFormat::kNanogpt);  // count does not fit
}

}  // namespace
}  // namespace ntp::model
