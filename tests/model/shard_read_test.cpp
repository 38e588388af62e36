// Reading a rank's shard straight out of an llm.c or llama2.c checkpoint gives
// bit for bit what reading the whole file, reordering it and scattering the
// rank's units gives, for random non-contiguous unit sets at TP 1, 2 and 3; a
// file that does not fit the layout is refused naming the file and the field.
#include "model/shard_read.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "file_test_util.h"
#include "model/binary_file.h"
#include "model/llama2c_checkpoint.h"
#include "model/llmc_checkpoint.h"
#include "model/model_file.h"
#include "model/parameters.h"
#include "model_test_util.h"

namespace ntp::model {
namespace {

namespace fs = std::filesystem;

class ShardRead : public ::testing::Test {
 protected:
  ShardRead() : dir_(fs::temp_directory_path() / ("ntp-shard-read-" + std::to_string(::getpid()))) {
    fs::create_directories(dir_);
  }
  ~ShardRead() override { fs::remove_all(dir_); }

  std::string path(const char* name) const { return (dir_ / name).string(); }

  static std::vector<float> random_params(const GptConfig& c, std::uint32_t seed) {
    std::vector<float> p(static_cast<std::size_t>(parameter_count(c)));
    std::mt19937 rng(seed);
    std::normal_distribution<float> d;
    for (float& x : p) x = d(rng);
    return p;
  }

  // The rank's values the way the trainer took them before: the whole file
  // read, reordered into the full layout, the rank's units scattered out.
  static std::vector<float> old_way(const GptConfig& c, const std::string& file, const ParameterLayout& shard) {
    const std::vector<char> bytes = testing::read_bytes(file);
    std::vector<float> llmc((bytes.size() - kHeaderInts * 4) / 4);
    std::memcpy(llmc.data(), bytes.data() + kHeaderInts * 4, llmc.size() * 4);
    const std::vector<float> full_values = from_llmc_order(c, llmc);
    std::vector<float> out(static_cast<std::size_t>(shard.size()));
    scatter_from_full(ParameterLayout(c, Shard::full(c)), full_values, shard, out);
    return out;
  }

  static std::vector<float> scattered(const GptConfig& c, const std::vector<float>& full_values,
                                      const ParameterLayout& shard) {
    std::vector<float> out(static_cast<std::size_t>(shard.size()));
    scatter_from_full(ParameterLayout(c, Shard::full(c)), full_values, shard, out);
    return out;
  }

  static std::vector<float> read(const std::string& file, const ParameterLayout& shard) {
    std::vector<float> out(static_cast<std::size_t>(shard.size()), -1.0f);
    read_model_shard(file, shard, out);
    return out;
  }

  static bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
  }

  fs::path dir_;
};

TEST_F(ShardRead, LlmcShardEqualsTheWholeFileReorderedAndScattered) {
  const GptConfig c = testing::small_test_config();
  write_llmc_checkpoint(path("gpt2.bin"), c, random_params(c, 5));
  for (int tp : {1, 2, 3}) {
    for (std::uint32_t seed : {1u, 2u}) {
      for (const Shard& shard : testing::random_shards(c, tp, seed * 10 + static_cast<std::uint32_t>(tp))) {
        const ParameterLayout layout(c, shard);
        EXPECT_TRUE(same_bits(read(path("gpt2.bin"), layout), old_way(c, path("gpt2.bin"), layout)))
            << "tp " << tp << " seed " << seed << " heads " << shard.heads.to_string();
      }
    }
  }
}

TEST_F(ShardRead, Llama2cShardEqualsTheWrittenModelScattered) {
  GptConfig c = testing::llama_test_config();
  c.padded_vocab = c.vocab;  // the format has no padding rows
  std::vector<float> params = random_params(c, 6);
  for (bool shared : {false, true}) {
    if (shared) {  // the classifier is the embedding
      const ParameterLayout full(c, Shard::full(c));
      std::copy_n(params.begin() + full["wte"].offset, full["wte"].count, params.begin() + full["lm_head"].offset);
    }
    write_llama2c_checkpoint(path("llama.bin"), c, params);
    for (int tp : {1, 2, 3}) {
      for (const Shard& shard : testing::random_shards(c, tp, 30u + static_cast<std::uint32_t>(tp))) {
        const ParameterLayout layout(c, shard);
        EXPECT_TRUE(same_bits(read(path("llama.bin"), layout), scattered(c, params, layout)))
            << "tp " << tp << " shared " << shared << " groups " << shard.heads.to_string();
      }
    }
  }
}

// The comparison can fail: one changed float in the file (in the transposed
// fc2 of layer 1) shows on exactly the rank that holds its neuron.
TEST_F(ShardRead, OneChangedFloatShowsOnTheRankHoldingIt) {
  const GptConfig c = testing::small_test_config();
  std::vector<float> params = random_params(c, 7);
  const ParameterLayout full(c, Shard::full(c));
  const std::int64_t neuron = 101;
  params[static_cast<std::size_t>(full["h1.fc2_wt"].offset + neuron * c.d_model + 3)] += 1.0f;
  write_llmc_checkpoint(path("changed.bin"), c, params);
  write_llmc_checkpoint(path("gpt2.bin"), c, random_params(c, 7));
  int differing = 0;
  for (const Shard& shard : testing::random_shards(c, 3, 9)) {
    const ParameterLayout layout(c, shard);
    const bool differs = !same_bits(read(path("changed.bin"), layout), old_way(c, path("gpt2.bin"), layout));
    EXPECT_EQ(differs, shard.neurons.contains(neuron)) << shard.neurons.to_string();
    differing += differs ? 1 : 0;
  }
  EXPECT_EQ(differing, 1);
}

TEST_F(ShardRead, RefusesAFileThatDoesNotFitNamingFileAndField) {
  const GptConfig c = testing::small_test_config();
  write_llmc_checkpoint(path("gpt2.bin"), c, random_params(c, 8));
  const std::vector<char> good = testing::read_bytes(path("gpt2.bin"));
  testing::write_bytes(path("short.bin"), std::vector<char>(good.begin(), good.end() - 4));
  std::vector<char> longer = good;
  longer.push_back(0);
  testing::write_bytes(path("long.bin"), longer);
  const ParameterLayout layout(c, testing::random_shards(c, 2, 4)[1]);
  const auto read_into_layout = [&](const std::string& f) { return read(f, layout); };
  testing::expect_file_rejected(read_into_layout, path("short.bin"), "parameters");
  testing::expect_file_rejected(read_into_layout, path("long.bin"), "parameters");
  testing::expect_file_rejected(read_into_layout, path("missing.bin"), "file");
  // The header alone (the check before the ranks start) refuses both sizes too.
  testing::expect_file_rejected([](const std::string& f) { return read_llmc_config(f); }, path("short.bin"),
                                "parameters");
  testing::expect_file_rejected([](const std::string& f) { return read_llmc_config(f); }, path("long.bin"),
                                "parameters");
  // Another model than the layout's: refused naming the header.
  GptConfig other = c;
  other.layers = 3;
  write_llmc_checkpoint(path("other.bin"), other, random_params(other, 8));
  testing::expect_file_rejected(read_into_layout, path("other.bin"), "header");
}

TEST_F(ShardRead, PositionedReadsFillScatteredPiecesAndStopAtTheEnd) {
  std::vector<char> bytes(5000);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7);
  testing::write_bytes(path("bytes.bin"), bytes);
  const PositionedFile file(path("bytes.bin"));
  EXPECT_EQ(file.size(), bytes.size());
  std::vector<char> a(100), b(3);
  const iovec pieces[] = {{a.data(), a.size()}, {b.data(), b.size()}};
  file.read(4000, pieces, "x");
  EXPECT_TRUE(std::equal(a.begin(), a.end(), bytes.begin() + 4000));
  EXPECT_TRUE(std::equal(b.begin(), b.end(), bytes.begin() + 4100));
  file.read(5000, nullptr, 0, "nothing");  // an empty read at the end is no error
  testing::expect_file_rejected([&](const std::string&) { file.read(4900, pieces, "the field"); return 0; },
                                path("bytes.bin"), "the field");
}

}  // namespace
}  // namespace ntp::model
