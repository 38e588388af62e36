#pragma once
// Model architecture hyper-parameters and the named presets, for the two
// families: GPT-2 (LayerNorm, GELU, learned positions, tied embeddings, biases)
// and Llama (RMSNorm, RoPE, SwiGLU, grouped-query attention, untied
// embeddings, no biases). See docs/model.md for the units of each family.
#include <cstdint>
#include <string>
#include <string_view>

namespace ntp::model {

enum class Family { kGpt2, kLlama };
const char* to_string(Family family);
// "gpt2" or "llama"; throws std::invalid_argument naming the other spellings.
Family family_from_string(std::string_view name);

// Llama's RoPE base and RMSNorm epsilon unless configured (Llama 2's values;
// llama2.c's format has no field for them, so its readers assume these).
inline constexpr float kDefaultRopeTheta = 10000.0f;
inline constexpr float kDefaultNormEps = 1e-5f;

struct GptConfig {
  std::int64_t vocab = 0;         // real vocabulary (50257 for GPT-2)
  std::int64_t padded_vocab = 0;  // embedding rows, >= vocab (50304: a multiple of 128)
  std::int64_t layers = 0;
  std::int64_t d_model = 0;
  std::int64_t heads = 0;         // query heads
  std::int64_t max_seq = 0;       // rows of the position embedding (Llama: RoPE positions)
  Family family = Family::kGpt2;
  // Llama only (0 for GPT-2):
  std::int64_t kv_heads = 0;      // key/value heads; divides heads
  std::int64_t ffn_hidden = 0;    // SwiGLU neurons per layer
  float rope_theta = kDefaultRopeTheta;  // RoPE base
  float norm_eps = kDefaultNormEps;      // RMSNorm epsilon

  bool llama() const { return family == Family::kLlama; }
  std::int64_t head_dim() const { return d_model / heads; }
  // Units of kind head: GPT-2 heads; Llama KV groups (one key head, one value
  // head and the query heads that read them).
  std::int64_t head_units() const { return llama() ? kv_heads : heads; }
  std::int64_t queries_per_group() const { return heads / head_units(); }
  std::int64_t ffn() const { return llama() ? ffn_hidden : 4 * d_model; }  // FFN neurons per layer
  // Throws std::invalid_argument naming the field that is wrong.
  void validate() const;
  bool operator==(const GptConfig&) const = default;
};

// GPT-2: "tiny" (byte vocabulary, seconds per step), "small", "gpt2" (124M).
// Llama: "llama-tiny" (byte vocabulary), "llama-small", "llama-1b" (shaped
// like a 1B model, for benchmarks). Throws std::invalid_argument for a name
// that is not a preset of `family`.
GptConfig preset(std::string_view name, Family family = Family::kGpt2);

// Parameters of the whole (unsharded) model, padding rows included. Throws
// std::invalid_argument above kMaxParameters (the sizes would overflow).
constexpr std::int64_t kMaxParameters = std::int64_t{1} << 60;
std::int64_t parameter_count(const GptConfig& config);

std::string to_string(const GptConfig& config);
// The shortest text that reads back as the same float: "1e-05", "5e+05".
std::string float_text(float value);

}  // namespace ntp::model
