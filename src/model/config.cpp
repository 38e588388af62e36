#include "model/config.h"

#include <charconv>
#include <cmath>
#include <stdexcept>

namespace ntp::model {

std::string float_text(float value) {
  char text[32];
  const auto end = std::to_chars(text, text + sizeof text, value).ptr;
  return std::string(text, end);
}

namespace {
void require(bool ok, const char* field, const std::string& why) {
  if (!ok) throw std::invalid_argument(std::string("model config: ") + field + " " + why);
}
}  // namespace

const char* to_string(Family family) { return family == Family::kLlama ? "llama" : "gpt2"; }

Family family_from_string(std::string_view name) {
  if (name == "gpt2") return Family::kGpt2;
  if (name == "llama") return Family::kLlama;
  throw std::invalid_argument("model family: unknown name '" + std::string(name) +
                              "' (expected gpt2 or llama)");
}

void GptConfig::validate() const {
  require(vocab > 0, "vocab", "must be > 0");
  require(padded_vocab >= vocab, "padded_vocab", "must be >= vocab");
  require(layers > 0, "layers", "must be > 0");
  require(heads > 0, "heads", "must be > 0");
  require(d_model > 0 && d_model % heads == 0, "d_model", "must be a positive multiple of heads");
  require(max_seq > 0, "max_seq", "must be > 0");
  if (llama()) {
    require(kv_heads > 0 && heads % kv_heads == 0, "kv_heads",
            "must be > 0 and divide heads (" + std::to_string(heads) + ")");
    require(ffn_hidden > 0, "ffn_hidden", "must be > 0");
    require(head_dim() % 2 == 0, "d_model", "/ heads must be even (RoPE rotates pairs)");
    require(std::isfinite(rope_theta) && rope_theta > 0.0f, "rope_theta",
            "is " + float_text(rope_theta) + ", must be finite and > 0");
    require(std::isfinite(norm_eps) && norm_eps > 0.0f, "norm_eps",
            "is " + float_text(norm_eps) + ", must be finite and > 0");
  } else {
    require(kv_heads == 0 && ffn_hidden == 0, "kv_heads",
            "and ffn_hidden are Llama fields (0 for GPT-2)");
  }
  parameter_count(*this);  // throws if the sizes overflow
}

namespace {
GptConfig llama(std::int64_t vocab, std::int64_t layers, std::int64_t d_model, std::int64_t heads,
                std::int64_t kv_heads, std::int64_t ffn_hidden, std::int64_t max_seq) {
  GptConfig c{vocab, vocab, layers, d_model, heads, max_seq};
  c.family = Family::kLlama;
  c.kv_heads = kv_heads;
  c.ffn_hidden = ffn_hidden;
  return c;
}
}  // namespace

GptConfig preset(std::string_view name, Family family) {
  if (family == Family::kGpt2) {
    if (name == "tiny") return {256, 256, 2, 64, 4, 64};
    if (name == "small") return {50257, 50304, 4, 256, 8, 256};
    if (name == "gpt2") return {50257, 50304, 12, 768, 12, 1024};
  } else {
    // SwiGLU widths as Llama sizes them: about 8/3 d_model, not a multiple of
    // any TP degree but powers of two.
    if (name == "llama-tiny") return llama(256, 2, 64, 4, 2, 172, 64);
    if (name == "llama-small") return llama(32000, 4, 256, 8, 4, 688, 256);
    if (name == "llama-1b") return llama(32000, 22, 2048, 32, 8, 5632, 2048);
  }
  const std::string names = family == Family::kGpt2 ? "tiny, small or gpt2"
                                                     : "llama-tiny, llama-small or llama-1b";
  throw std::invalid_argument("model preset: unknown " + std::string(to_string(family)) +
                              " preset '" + std::string(name) + "' (expected " + names +
                              "; the model family picks the preset list)");
}

namespace {
// The count in any arithmetic type N: long double to bound it first, since
// sizes from an untrusted file header can overflow the exact int64 count.
template <typename N>
N count_in(const GptConfig& c) {
  const N C = static_cast<N>(c.d_model), F = static_cast<N>(c.ffn()), V = static_cast<N>(c.padded_vocab);
  if (c.llama()) {
    const N hd = static_cast<N>(c.head_dim()), H = static_cast<N>(c.heads), K = static_cast<N>(c.kv_heads);
    const N per_layer = C + (H + 2 * K) * hd * C + H * hd * C + C + 3 * F * C;
    return 2 * V * C + static_cast<N>(c.layers) * per_layer + C;
  }
  const N per_layer = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C + (F * C + F) + (F * C + C);
  return V * C + static_cast<N>(c.max_seq) * C + static_cast<N>(c.layers) * per_layer + 2 * C;
}
}  // namespace

std::int64_t parameter_count(const GptConfig& c) {
  if (count_in<long double>(c) > static_cast<long double>(kMaxParameters))
    throw std::invalid_argument("model config: parameter count of " + to_string(c) +
                                " exceeds 2^60");
  return count_in<std::int64_t>(c);
}

std::string to_string(const GptConfig& c) {
  std::string s = std::string(to_string(c.family)) + ": vocab " + std::to_string(c.vocab) +
                  " (padded " + std::to_string(c.padded_vocab) + "), layers " +
                  std::to_string(c.layers) + ", d_model " + std::to_string(c.d_model) + ", heads " +
                  std::to_string(c.heads) + ", max_seq " + std::to_string(c.max_seq);
  if (c.llama()) {
    s += ", kv_heads " + std::to_string(c.kv_heads) + ", ffn_hidden " + std::to_string(c.ffn_hidden);
    if (c.rope_theta != kDefaultRopeTheta) s += ", rope_theta " + float_text(c.rope_theta);
    if (c.norm_eps != kDefaultNormEps) s += ", norm_eps " + float_text(c.norm_eps);
  }
  return s;
}

}  // namespace ntp::model
