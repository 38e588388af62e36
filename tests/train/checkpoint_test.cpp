// Checkpoints written from one unit assignment and read at another must give
// back every parameter and moment bit for bit; every broken checkpoint (a
// truncated, corrupted or missing file, an unfinished save, another model, a
// manifest that loses or doubles units) must be rejected naming the file.
#include "model/binary_file.h"
#include "train/checkpoint.h"

#include <thread>

#include "train/checkpoint_saver.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <random>
#include <tuple>

#include <gtest/gtest.h>

#include "model/stage.h"

#include "tests/model/model_test_util.h"

namespace {

namespace fs = std::filesystem;
using ntp::layout::IntervalSet;
using ntp::model::ParameterLayout;
using ntp::model::Shard;
using ntp::train::Checkpoint;
using ntp::train::CheckpointError;

ntp::model::GptConfig small_model() {
  ntp::model::GptConfig c;
  c.vocab = 90;
  c.padded_vocab = 96;
  c.layers = 2;
  c.d_model = 24;
  c.heads = 3;
  c.max_seq = 8;
  return c;
}

// The full model's parameters and moments, random.
struct FullState {
  std::vector<float> params, m, v;
};

FullState random_state(const ParameterLayout& full, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  FullState s;
  for (std::vector<float>* x : {&s.params, &s.m, &s.v}) {
    x->resize(static_cast<std::size_t>(full.size()));
    for (float& value : *x) value = normal(rng);
  }
  return s;
}

// `parts` random, non-contiguous shards that together hold every unit once.
std::vector<Shard> random_split(const ntp::model::GptConfig& c, int parts, std::mt19937_64& rng) {
  std::vector<Shard> out(static_cast<std::size_t>(parts));
  const auto deal = [&](std::int64_t units, IntervalSet Shard::*member) {
    std::uniform_int_distribution<int> pick(0, parts - 1);
    for (std::int64_t u = 0; u < units; ++u) (out[static_cast<std::size_t>(pick(rng))].*member).add(u, u + 1);
  };
  deal(c.head_units(), &Shard::heads);
  deal(c.ffn(), &Shard::neurons);
  deal(c.padded_vocab, &Shard::vocab);
  return out;
}

// The parameters and moments of `state` that `layout` holds, in its order.
struct RankState {
  std::vector<float> p, m, v;
};
RankState rank_state(const ParameterLayout& full, const FullState& state, const ParameterLayout& layout) {
  RankState out;
  for (auto [to, from] : {std::pair{&out.p, &state.params}, {&out.m, &state.m}, {&out.v, &state.v}}) {
    to->resize(static_cast<std::size_t>(layout.size()));
    ntp::model::scatter_from_full(full, *from, layout, *to);
  }
  return out;
}

// The manifest of the parts `writers` wrote into `partial`: the checkpoint after `step` steps.
fs::path complete(const fs::path& root, const fs::path& partial, const ntp::model::GptConfig& c,
                  const std::vector<int>& writers, std::int64_t step) {
  ntp::train::CheckpointInfo info;
  info.step = step;
  info.optimizer_steps = step;
  info.model = c;
  info.seq_len = c.max_seq;
  info.order = "shuffled";
  const fs::path final = ntp::train::final_dir(root, step);
  ntp::train::complete_checkpoint(partial, final, info, writers, "# config\n", std::chrono::seconds(5));
  return final;
}

// Writes the parts of `split` (rank = index) of `state` into the save of
// `step` in progress; returns that folder.
fs::path write_parts(const fs::path& root, const ntp::model::GptConfig& c, const FullState& state,
                     const std::vector<Shard>& split, std::int64_t step) {
  const ParameterLayout full(c, Shard::full(c));
  const fs::path partial = ntp::train::partial_dir(root, step, 0);
  fs::create_directories(partial);
  for (std::size_t r = 0; r < split.size(); ++r) {
    const ParameterLayout layout(c, split[r]);
    const RankState x = rank_state(full, state, layout);
    ntp::train::write_part(partial, static_cast<int>(r), ntp::train::snapshot_part(layout, x.p, x.m, x.v, r == 0));
  }
  return partial;
}

std::vector<int> ranks_of(const std::vector<Shard>& split) {
  std::vector<int> writers(split.size());
  for (std::size_t r = 0; r < split.size(); ++r) writers[r] = static_cast<int>(r);
  return writers;
}

// Writes a checkpoint of `state` as the parts of `split` (rank = index).
fs::path save(const fs::path& root, const ntp::model::GptConfig& c, const FullState& state,
              const std::vector<Shard>& split, std::int64_t step) {
  return complete(root, write_parts(root, c, state, split, step), c, ranks_of(split), step);
}

// Loads `checkpoint` into `layout` and compares every parameter and moment
// with `state`'s values there, bit for bit: "" when all equal, else which differ.
std::string read_back(const Checkpoint& checkpoint, const ParameterLayout& full, const FullState& state,
                      const ParameterLayout& layout) {
  std::vector<float> want(static_cast<std::size_t>(layout.size()));
  std::vector<float> p(want.size(), -1), m(want.size(), -1), v(want.size(), -1);
  checkpoint.load(layout, p, m, v);
  for (const auto& [have, source, name] : {std::tuple{&p, &state.params, "parameters"},
                                           {&m, &state.m, "first moment"}, {&v, &state.v, "second moment"}}) {
    ntp::model::scatter_from_full(full, *source, layout, want);
    if (std::memcmp(have->data(), want.data(), want.size() * sizeof(float)) != 0) return std::string(name) + " differ";
  }
  return "";
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("ntp_checkpoint_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

void expect_error(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "accepted; expected an error with '" << needle << "'";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// The last save writes the rank's buffers themselves (part_view): the same
// file, byte for byte, as the copy a periodic save writes, with the checksum
// of those bytes; a part without the replicated tensors too.
TEST_F(CheckpointTest, AViewOfTheStateWritesTheBytesOfItsCopy) {
  const ntp::model::GptConfig c = small_model();
  const ParameterLayout full(c, Shard::full(c));
  std::mt19937_64 rng(11);
  const FullState state = random_state(full, 5);
  const std::vector<Shard> split = random_split(c, 2, rng);
  for (std::size_t r = 0; r < split.size(); ++r) {
    const ParameterLayout layout(c, split[r]);
    const RankState x = rank_state(full, state, layout);
    const bool replicated = r == 0;
    const ntp::train::CheckpointPart copy = ntp::train::snapshot_part(layout, x.p, x.m, x.v, replicated);
    const ntp::train::CheckpointPart view = ntp::train::part_view(layout, x.p, x.m, x.v, replicated);
    EXPECT_FALSE(copy.borrows_state());
    EXPECT_TRUE(view.borrows_state());
    EXPECT_EQ(view.bytes(), copy.values.size() * sizeof(float));
    fs::create_directories(root_ / "copy");
    fs::create_directories(root_ / "view");
    const ntp::train::PartRecord a = ntp::train::write_part(root_ / "copy", static_cast<int>(r), copy);
    const ntp::train::PartRecord b = ntp::train::write_part(root_ / "view", static_cast<int>(r), view);
    EXPECT_EQ(a.checksum, ntp::model::checksum_bytes(ntp::model::kChecksumBasis, copy.values.data(), view.bytes()));
    EXPECT_EQ(b.checksum, a.checksum);
    EXPECT_EQ(b.bytes, a.bytes);
    std::ifstream fa(root_ / "copy" / a.file, std::ios::binary), fb(root_ / "view" / b.file, std::ios::binary);
    const std::string bytes_a{std::istreambuf_iterator<char>(fa), {}};
    const std::string bytes_b{std::istreambuf_iterator<char>(fb), {}};
    EXPECT_EQ(bytes_a.size(), a.bytes);
    EXPECT_TRUE(bytes_a == bytes_b) << "part " << r;
  }
}

// The checksum of a stream in pieces of any length is the one of the whole.
TEST(Checksum, PiecesOfAnyLengthSumAsTheWhole) {
  std::vector<std::uint8_t> bytes(1000);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(i * 37 + 11);
  const std::uint64_t whole = ntp::model::checksum_bytes(ntp::model::kChecksumBasis, bytes.data(), bytes.size());
  for (std::size_t piece : {1u, 3u, 4u, 7u, 8u, 13u, 999u}) {
    ntp::model::Checksum sum;
    for (std::size_t at = 0; at < bytes.size(); at += piece) sum.add(bytes.data() + at, std::min(piece, bytes.size() - at));
    EXPECT_EQ(sum.value(), whole) << "pieces of " << piece;
  }
  // checksum_bytes chained piece by piece, without carrying the partial word, is not it.
  std::uint64_t chained = ntp::model::kChecksumBasis;
  for (std::size_t at = 0; at < bytes.size(); at += 7) {
    chained = ntp::model::checksum_bytes(chained, bytes.data() + at, std::min<std::size_t>(7, bytes.size() - at));
  }
  EXPECT_NE(chained, whole);
}

TEST_F(CheckpointTest, AnyLayoutReadsBackEveryValueBitForBit) {
  const ntp::model::GptConfig c = small_model();
  const ParameterLayout full(c, Shard::full(c));
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 6; ++trial) {
    const FullState state = random_state(full, 100 + static_cast<std::uint64_t>(trial));
    const int writers = 1 + trial % 4;
    const fs::path dir = save(root_, c, state, random_split(c, writers, rng), 10 + trial);
    const Checkpoint checkpoint = Checkpoint::open(dir);
    checkpoint.verify_checksums();
    EXPECT_EQ(checkpoint.info().step, 10 + trial);
    for (const Shard& target : random_split(c, 1 + (trial + 2) % 5, rng)) {
      ASSERT_EQ(read_back(checkpoint, full, state, ParameterLayout(c, target)), "")
          << "trial " << trial << ": " << writers << " parts read at " << target.heads.to_string();
    }
  }
}

// Writes a checkpoint of `state` as pipeline stages: each stage of `stages`
// split into `per_stage` random parts, the first of each carrying its
// stage's replicated tensors (a last GPT-2 stage's wte copy is never written).
fs::path save_staged(const fs::path& root, const ntp::model::GptConfig& c, const FullState& state,
                     const std::vector<ntp::model::StageRange>& stages, int per_stage, std::mt19937_64& rng,
                     std::int64_t step, int skip_stage = -1) {
  const ParameterLayout full(c, Shard::full(c));
  const fs::path partial = ntp::train::partial_dir(root, step, 0);
  fs::create_directories(partial);
  std::vector<int> writers;
  int rank = 0;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const std::vector<Shard> split = random_split(c, per_stage, rng);
    for (std::size_t k = 0; k < split.size(); ++k, ++rank) {
      if (static_cast<int>(s) == skip_stage) continue;
      const ParameterLayout layout(c, split[k], stages[s]);
      const RankState x = rank_state(full, state, layout);
      ntp::train::write_part(partial, rank, ntp::train::snapshot_part(layout, x.p, x.m, x.v, k == 0));
      writers.push_back(rank);
    }
  }
  return complete(root, partial, c, writers, step);
}

// Parts of pipeline stages (pp 2 and 3 over 4 blocks, GPT-2 with its tied
// wte and Llama) read back into the whole model and into another stage
// split, every value bit for bit: a last stage's wte copy comes from the
// first stage's part. A checkpoint without one stage's parts is rejected,
// naming a tensor of that stage.
TEST_F(CheckpointTest, StagedPartsReadBackAtAnyStageSplitBitForBit) {
  ntp::model::GptConfig llama = ntp::model::testing::llama_test_config();
  std::int64_t step = 1;  // each save its own step: a step saved before is kept, not replaced
  for (ntp::model::GptConfig c : {small_model(), llama}) {
    c.layers = 4;
    const ParameterLayout full(c, Shard::full(c));
    std::mt19937_64 rng(11);
    for (int pp : {2, 3}) {
      const FullState state = random_state(full, 200 + static_cast<std::uint64_t>(pp));
      const fs::path dir = save_staged(root_, c, state, ntp::model::split_layers(4, pp), 2, rng, step++);
      const Checkpoint checkpoint = Checkpoint::open(dir);
      checkpoint.verify_checksums();
      for (int target_pp : {1, 2, 4}) {
        for (const ntp::model::StageRange& stage : ntp::model::split_layers(4, target_pp)) {
          ASSERT_EQ(read_back(checkpoint, full, state, ParameterLayout(c, random_split(c, 1, rng)[0], stage)), "")
              << ntp::model::to_string(c.family) << ": pp " << pp << " read at pp " << target_pp << ", "
              << ntp::model::to_string(stage);
        }
      }
      expect_error([&] { Checkpoint::open(save_staged(root_, c, state, ntp::model::split_layers(4, pp), 2, rng, step++, 1)); },
                   "h2.");
    }
  }
}

TEST_F(CheckpointTest, BrokenCheckpointsAreRejectedNamingTheFile) {
  const ntp::model::GptConfig c = small_model();
  const ParameterLayout full(c, Shard::full(c));
  std::mt19937_64 rng(3);
  const fs::path dir = save(root_, c, random_state(full, 1), random_split(c, 2, rng), 4);
  const fs::path part = dir / "rank-1.bin";
  // One flipped bit: the sizes agree, the checksum does not.
  {
    std::fstream f(part, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(100);
    char byte = 0;
    f.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x10);
    f.seekp(100);
    f.write(&byte, 1);
  }
  expect_error([&] { Checkpoint::open(dir).verify_checksums(); }, "rank-1.bin: checksum");
  // Truncated.
  fs::resize_file(part, fs::file_size(part) - 4);
  expect_error([&] { Checkpoint::open(dir); }, "rank-1.bin:");
  // Missing.
  fs::remove(part);
  expect_error([&] { Checkpoint::open(dir); }, "rank-1.bin: missing");
  // Another model shape.
  const fs::path other = save(root_, c, random_state(full, 2), random_split(c, 1, rng), 8);
  ntp::model::GptConfig bigger = c;
  bigger.heads = 4;
  expect_error([&] { Checkpoint::open(other).check_model(bigger); }, "heads is 3");
  // A save that did not finish: no manifest.
  fs::create_directories(root_ / "step-12.partial-e0");
  expect_error([&] { ntp::train::resolve_checkpoint(root_ / "step-12.partial-e0"); }, "did not finish");
  fs::remove(other / "manifest.json");
  expect_error([&] { Checkpoint::open(other); }, "incomplete");
}

// A run directory resumes from its newest intact checkpoint: a newer one
// whose part was truncated (a full disk, a partial copy) is skipped and named
// with why; with none intact the error names each. A checkpoint folder named
// directly is never swapped for another.
TEST_F(CheckpointTest, ARunDirectoryResumesFromItsNewestIntactCheckpoint) {
  const ntp::model::GptConfig c = small_model();
  const ParameterLayout full(c, Shard::full(c));
  std::mt19937_64 rng(5);
  const fs::path root = root_ / "checkpoints";
  const fs::path older = save(root, c, random_state(full, 1), random_split(c, 2, rng), 4);
  const fs::path newer = save(root, c, random_state(full, 2), random_split(c, 2, rng), 8);
  std::vector<std::string> skipped;
  EXPECT_EQ(ntp::train::resolve_checkpoint(root_, &skipped), newer);
  EXPECT_TRUE(skipped.empty());
  fs::resize_file(newer / "rank-1.bin", fs::file_size(newer / "rank-1.bin") / 2);
  EXPECT_EQ(ntp::train::resolve_checkpoint(root_, &skipped), older);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("step-8: "), std::string::npos) << skipped[0];
  EXPECT_NE(skipped[0].find("rank-1.bin"), std::string::npos) << skipped[0];
  EXPECT_NE(skipped[0].find("truncated"), std::string::npos) << skipped[0];
  EXPECT_EQ(ntp::train::resolve_checkpoint(newer), newer);  // named directly: the open that follows refuses it
  expect_error([&] { Checkpoint::open(ntp::train::resolve_checkpoint(newer)); }, "rank-1.bin");
  fs::remove(older / "rank-0.bin");
  expect_error([&] { ntp::train::resolve_checkpoint(root_); }, "no intact checkpoint");
  expect_error([&] { ntp::train::resolve_checkpoint(root_); }, "step-4: ");
}

// A Llama checkpoint (KV-group head units, SwiGLU neurons, untied vocabulary
// rows) reads back at another layout bit for bit; its manifest records the
// family and shape, so a GPT-2 of the same sizes, or another KV grouping, is refused.
TEST_F(CheckpointTest, ALlamaCheckpointRecordsItsFamilyAndShape) {
  ntp::model::GptConfig c = small_model();
  c.padded_vocab = c.vocab;
  c.heads = 4;
  c.family = ntp::model::Family::kLlama;
  c.kv_heads = 2;
  c.ffn_hidden = 37;
  c.rope_theta = 500000.0f;  // not the defaults: the manifest must carry them
  c.norm_eps = 1e-6f;
  const ParameterLayout full(c, Shard::full(c));
  std::mt19937_64 rng(11);
  const FullState state = random_state(full, 9);
  const fs::path dir = save(root_, c, state, random_split(c, 3, rng), 4);
  const Checkpoint checkpoint = Checkpoint::open(dir);
  EXPECT_EQ(checkpoint.info().model, c);
  checkpoint.check_model(c);
  for (const Shard& target : random_split(c, 2, rng)) {
    const ParameterLayout layout(c, target);
    std::vector<float> want(static_cast<std::size_t>(layout.size())), p(want.size()), m(want.size()), v(want.size());
    checkpoint.load(layout, p, m, v);
    ntp::model::scatter_from_full(full, state.params, layout, want);
    EXPECT_EQ(p, want);
  }
  ntp::model::GptConfig gpt2 = c;
  gpt2.family = ntp::model::Family::kGpt2;
  gpt2.kv_heads = gpt2.ffn_hidden = 0;
  expect_error([&] { checkpoint.check_model(gpt2); }, "model family is llama");
  ntp::model::GptConfig regrouped = c;
  regrouped.kv_heads = 4;
  expect_error([&] { checkpoint.check_model(regrouped); }, "kv_heads is 2");
  ntp::model::GptConfig rebased = c;
  rebased.rope_theta = 10000.0f;
  expect_error([&] { checkpoint.check_model(rebased); }, "rope_theta is 5e+05, the configured model has 10000");
  ntp::model::GptConfig renormed = c;
  renormed.norm_eps = 1e-5f;
  expect_error([&] { checkpoint.check_model(renormed); }, "norm_eps is 1e-06, the configured model has 1e-05");
}

TEST_F(CheckpointTest, AManifestThatLosesOrDoublesUnitsIsRejected) {
  const ntp::model::GptConfig c = small_model();
  const ParameterLayout full(c, Shard::full(c));
  std::mt19937_64 rng(5);
  const fs::path dir = save(root_, c, random_state(full, 3), random_split(c, 2, rng), 2);
  std::ifstream in(dir / "manifest.json");
  const nlohmann::json good = nlohmann::json::parse(in);
  in.close();
  const auto rewrite_and_open = [&](const nlohmann::json& manifest) {
    std::ofstream(dir / "manifest.json") << manifest.dump();
    Checkpoint::open(dir);
  };
  nlohmann::json lost = good;
  lost["parts"][1]["heads"] = nlohmann::json::array();
  lost["parts"][0]["heads"] = nlohmann::json::array();
  EXPECT_THROW(rewrite_and_open(lost), CheckpointError);
  nlohmann::json doubled = good;
  doubled["parts"][1]["vocab"] = {{0, c.padded_vocab}};
  EXPECT_THROW(rewrite_and_open(doubled), CheckpointError);
  nlohmann::json two_replicated = good;
  two_replicated["parts"][1]["replicated"] = true;
  EXPECT_THROW(rewrite_and_open(two_replicated), CheckpointError);
  // Units outside the model are a damaged checkpoint too (CheckpointError, so
  // that a resume skips it for an older one), naming the part.
  nlohmann::json outside = good;
  outside["parts"][0]["heads"] = {{0, c.heads + 5}};
  expect_error([&] { rewrite_and_open(outside); }, "part rank-0.bin");
  // A stage's blocks must be two integer block indices inside the model.
  for (const char* layers : {"[0, 1.5]", "[0]", "[-1, 1]", "[1, 1]", "[0, 9]", "\"0-1\""}) {
    nlohmann::json staged = good;
    staged["parts"][0]["layers"] = nlohmann::json::parse(layers);
    expect_error([&] { rewrite_and_open(staged); }, "rank-0.bin");
  }
  rewrite_and_open(good);  // the untouched manifest still opens
}

TEST_F(CheckpointTest, AMissingPartEndsTheSaveAtItsDeadline) {
  const fs::path partial = ntp::train::partial_dir(root_, 3, 1);
  fs::create_directories(partial);
  const auto start = std::chrono::steady_clock::now();
  try {
    ntp::train::complete_checkpoint(partial, ntp::train::final_dir(root_, 3), {}, {0, 1}, "",
                                    std::chrono::milliseconds(200));
    FAIL() << "completed without its parts";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 did not write its part"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  EXPECT_FALSE(fs::exists(ntp::train::final_dir(root_, 3)));
}

// A save whose writers' parts leave units out (or hold some twice) fails
// before the folder is published, naming the units: a resume would refuse it.
TEST_F(CheckpointTest, PartsThatMissOrRepeatUnitsAreNotPublished) {
  const ntp::model::GptConfig c = small_model();
  const ParameterLayout full(c, Shard::full(c));
  const FullState state = random_state(full, 6);
  std::mt19937_64 rng(11);
  const std::vector<Shard> split = random_split(c, 2, rng);
  std::int64_t step = 4;
  for (const std::vector<Shard>& parts : {std::vector<Shard>{split[0]}, std::vector<Shard>{split[0], split[0]}}) {
    const fs::path partial = write_parts(root_, c, state, parts, step);
    expect_error([&] { complete(root_, partial, c, ranks_of(parts), step); },
                 parts.size() == 1 ? "the parts hold" : "held by two parts");
    EXPECT_FALSE(fs::exists(ntp::train::final_dir(root_, step)));
    EXPECT_TRUE(fs::exists(partial));  // left for prune_checkpoints
    ++step;
  }
  EXPECT_TRUE(ntp::train::complete_checkpoints(root_).empty());
}

TEST_F(CheckpointTest, PruningKeepsTheNewestAndSavesStillInFlight) {
  const ntp::model::GptConfig c = small_model();
  const ParameterLayout full(c, Shard::full(c));
  std::mt19937_64 rng(9);
  for (int step : {5, 10, 15}) save(root_, c, random_state(full, 4), random_split(c, 1, rng), step);
  fs::create_directories(ntp::train::partial_dir(root_, 12, 0));  // abandoned
  fs::create_directories(ntp::train::partial_dir(root_, 20, 0));  // another rank's save in flight
  ntp::train::prune_checkpoints(root_, 2, 15);
  const std::vector<fs::path> left = ntp::train::complete_checkpoints(root_);
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0].filename(), "step-10");
  EXPECT_EQ(left[1].filename(), "step-15");
  EXPECT_FALSE(fs::exists(ntp::train::partial_dir(root_, 12, 0)));
  EXPECT_TRUE(fs::exists(ntp::train::partial_dir(root_, 20, 0)));
  EXPECT_EQ(ntp::train::newest_checkpoint(root_)->filename(), "step-15");
}

TEST(CheckpointChecksum, ChangesWithAnyBitAndTheTail) {
  std::vector<unsigned char> bytes(37, 0x5a);
  const std::uint64_t h = ntp::model::checksum_bytes(ntp::model::kChecksumBasis, bytes.data(), bytes.size());
  for (std::size_t i : {std::size_t{0}, std::size_t{17}, std::size_t{36}}) {
    bytes[i] ^= 1;
    EXPECT_NE(h, ntp::model::checksum_bytes(ntp::model::kChecksumBasis, bytes.data(), bytes.size())) << i;
    bytes[i] ^= 1;
  }
}

}  // namespace

namespace {

// The save thread copies the state while training goes on; whatever would
// change the state first waits for that copy, so the part holds the values
// as they were at the save.
TEST_F(CheckpointTest, AnUpdateWaitsForTheBackgroundCopy) {
  const ntp::train::Config config;
  const ntp::train::RunDir run = ntp::train::RunDir::create(root_ / "run");
  ntp::train::CheckpointSaver saver(config, run);
  EXPECT_LT(saver.wait_for_copy(), 0.05);  // nothing in flight
  std::vector<float> state(1000, 1.0f);
  ntp::train::SaveJob job;
  job.info.step = 3;
  job.copy = [&state](std::vector<float>) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ntp::train::CheckpointPart part;
    part.values = state;
    return part;
  };
  saver.save(std::move(job));
  EXPECT_GT(saver.wait_for_copy(), 0.1);
  state.assign(state.size(), 2.0f);  // the "update"
  saver.wait();
  std::ifstream in(ntp::train::partial_dir(saver.root(), 3, 0) / "rank-0.bin", std::ios::binary);
  float first = 0;
  in.read(reinterpret_cast<char*>(&first), sizeof first);
  EXPECT_EQ(first, 1.0f);
}

}  // namespace
