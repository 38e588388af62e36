#include "model/config.h"

#include <stdexcept>

namespace ntp::model {

namespace {
void require(bool ok, const char* field, const std::string& why) {
  if (!ok) throw std::invalid_argument(std::string("model config: ") + field + " " + why);
}
}  // namespace

void GptConfig::validate() const {
  require(vocab > 0, "vocab", "must be > 0");
  require(padded_vocab >= vocab, "padded_vocab", "must be >= vocab");
  require(layers > 0, "layers", "must be > 0");
  require(heads > 0, "heads", "must be > 0");
  require(d_model > 0 && d_model % heads == 0, "d_model", "must be a positive multiple of heads");
  require(max_seq > 0, "max_seq", "must be > 0");
  parameter_count(*this);  // throws if the sizes overflow
}

GptConfig preset(std::string_view name) {
  if (name == "tiny") return {256, 256, 2, 64, 4, 64};
  if (name == "small") return {50257, 50304, 4, 256, 8, 256};
  if (name == "gpt2") return {50257, 50304, 12, 768, 12, 1024};
  throw std::invalid_argument("model preset: unknown name '" + std::string(name) +
                              "' (expected tiny, small or gpt2)");
}

namespace {
// The count in any arithmetic type N: long double to bound it first, since
// sizes from an untrusted file header can overflow the exact int64 count.
template <typename N>
N count_in(const GptConfig& c) {
  const N C = static_cast<N>(c.d_model), F = 4 * C;
  const N per_layer = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C + (F * C + F) + (F * C + C);
  return static_cast<N>(c.padded_vocab) * C + static_cast<N>(c.max_seq) * C +
         static_cast<N>(c.layers) * per_layer + 2 * C;
}
}  // namespace

std::int64_t parameter_count(const GptConfig& c) {
  if (count_in<long double>(c) > static_cast<long double>(kMaxParameters))
    throw std::invalid_argument("model config: parameter count of " + to_string(c) +
                                " exceeds 2^60");
  return count_in<std::int64_t>(c);
}

std::string to_string(const GptConfig& c) {
  return "vocab " + std::to_string(c.vocab) + " (padded " + std::to_string(c.padded_vocab) +
         "), layers " + std::to_string(c.layers) + ", d_model " + std::to_string(c.d_model) +
         ", heads " + std::to_string(c.heads) + ", max_seq " + std::to_string(c.max_seq);
}

}  // namespace ntp::model
