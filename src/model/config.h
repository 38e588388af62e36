#pragma once
// GPT-2 architecture hyper-parameters and the named presets.
#include <cstdint>
#include <string>
#include <string_view>

namespace ntp::model {

struct GptConfig {
  std::int64_t vocab = 0;         // real vocabulary (50257 for GPT-2)
  std::int64_t padded_vocab = 0;  // embedding rows, >= vocab (50304: a multiple of 128)
  std::int64_t layers = 0;
  std::int64_t d_model = 0;
  std::int64_t heads = 0;
  std::int64_t max_seq = 0;       // rows of the position embedding

  std::int64_t head_dim() const { return d_model / heads; }
  std::int64_t ffn() const { return 4 * d_model; }  // FFN neurons per layer
  // Throws std::invalid_argument naming the field that is wrong.
  void validate() const;
  bool operator==(const GptConfig&) const = default;
};

// "tiny" (byte vocabulary, seconds per step), "small", "gpt2" (124M).
// Throws std::invalid_argument for an unknown name.
GptConfig preset(std::string_view name);

// Parameters of the whole (unsharded) model, padding rows included. Throws
// std::invalid_argument above kMaxParameters (the sizes would overflow).
constexpr std::int64_t kMaxParameters = std::int64_t{1} << 60;
std::int64_t parameter_count(const GptConfig& config);

std::string to_string(const GptConfig& config);

}  // namespace ntp::model
