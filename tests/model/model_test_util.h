#pragma once
// Shared fixtures of the model tests: a small config whose head and neuron
// counts are awkward for every TP degree, batches, and random unit sets.
#include <cstdint>
#include <random>
#include <vector>

#include "layout/interval_set.h"
#include "model/config.h"
#include "model/model.h"
#include "model/shard.h"

namespace ntp::model::testing {

// 11 heads of 4 (no TP degree tested divides 11), 176 neurons, vocabulary 61
// padded to 64 (so padding rows exist).
inline GptConfig small_test_config() { return {61, 64, 2, 44, 11, 16}; }

// Llama: 12 query heads over 4 KV groups (3 per group) of head size 4, 97
// SwiGLU neurons (prime: no TP degree divides it), vocabulary 61 padded to 64.
inline GptConfig llama_test_config() {
  GptConfig c{61, 64, 2, 48, 12, 16};
  c.family = Family::kLlama;
  c.kv_heads = 4;
  c.ffn_hidden = 97;
  return c;
}

// The same Llama with a RoPE base and an RMSNorm epsilon far from the
// defaults (10000, 1e-5), large enough to change every activation: theta 50
// turns the slowest pair 1/50 of the fastest's rate, and eps 0.05 is a tenth of
// the mean square of the normalised inputs (weights ~0.1, d_model 48).
inline GptConfig llama_settings_test_config() {
  GptConfig c = llama_test_config();
  c.rope_theta = 50.0f;
  c.norm_eps = 0.05f;
  return c;
}

struct TokenBatch {
  std::vector<std::int32_t> inputs, targets;
  std::int64_t batch = 0, seq = 0;
  Batch view() const { return {inputs.data(), targets.data(), batch, seq}; }
};

inline TokenBatch random_batch(const GptConfig& c, std::int64_t batch, std::int64_t seq,
                               std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int32_t> token(0, static_cast<std::int32_t>(c.vocab - 1));
  TokenBatch b{{}, {}, batch, seq};
  for (std::int64_t i = 0; i < batch * seq; ++i) {
    b.inputs.push_back(token(rng));
    b.targets.push_back(token(rng));
  }
  return b;
}

// Deals `units` ids to `ranks` sets at random: non-contiguous and uneven.
inline std::vector<layout::IntervalSet> random_partition(std::int64_t units, int ranks,
                                                         std::mt19937& rng) {
  std::vector<layout::IntervalSet> sets(static_cast<std::size_t>(ranks));
  std::uniform_int_distribution<int> pick(0, ranks - 1);
  for (std::int64_t u = 0; u < units; ++u) sets[static_cast<std::size_t>(pick(rng))].add(u, u + 1);
  return sets;
}

inline std::vector<Shard> random_shards(const GptConfig& c, int ranks, std::uint32_t seed) {
  std::mt19937 rng(seed);
  const auto heads = random_partition(c.head_units(), ranks, rng);
  const auto neurons = random_partition(c.ffn(), ranks, rng);
  const auto vocab = random_partition(c.padded_vocab, ranks, rng);
  std::vector<Shard> shards;
  for (int r = 0; r < ranks; ++r) {
    const auto i = static_cast<std::size_t>(r);
    shards.push_back({heads[i], neurons[i], vocab[i]});
  }
  return shards;
}

}  // namespace ntp::model::testing
