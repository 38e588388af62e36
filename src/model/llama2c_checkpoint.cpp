#include "model/llama2c_checkpoint.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <limits>
#include <stdexcept>

#include "model/binary_file.h"
#include "model/parameters.h"
#include "model/shard.h"
#include "model/shard_read.h"
#include "tensor/rope.h"

namespace ntp::model {

namespace {

// Visits every parameter element as (llama2.c index, full-layout index), in
// file order, the classifier last (file index from `at` onwards).
template <typename Fn>
std::int64_t for_each_element(const GptConfig& c, bool with_classifier, Fn pair) {
  const ParameterLayout full(c, Shard::full(c));
  const std::int64_t C = c.d_model, L = c.layers, F = c.ffn(), hd = c.head_dim();
  const std::int64_t H = c.heads, K = c.kv_heads, g = c.queries_per_group();
  std::int64_t at = 0;
  const auto base = [&](std::int64_t l, const char* name) {
    return full["h" + std::to_string(l) + "." + name].offset;
  };
  const auto per_layer = [&](const char* name, std::int64_t count) {
    for (std::int64_t l = 0; l < L; ++l)
      for (std::int64_t i = 0; i < count; ++i) pair(at++, base(l, name) + i);
  };
  // A [rows, C] matrix whose row r is row `ours_row(r)` of the [*, C] tensor `name`.
  const auto rows = [&](const char* name, std::int64_t count, auto ours_row) {
    for (std::int64_t l = 0; l < L; ++l)
      for (std::int64_t r = 0; r < count; ++r)
        for (std::int64_t i = 0; i < C; ++i) pair(at++, base(l, name) + ours_row(r) * C + i);
  };
  // llama2.c [C, cols] (out, in) -> ours [cols, C] (stored transposed).
  const auto transposed = [&](const char* name, std::int64_t cols) {
    for (std::int64_t l = 0; l < L; ++l)
      for (std::int64_t o = 0; o < C; ++o)
        for (std::int64_t i = 0; i < cols; ++i) pair(at++, base(l, name) + i * C + o);
  };
  // Row of a head's element d within the qkv_w tensor: group-major, per group
  // g query heads, then the key head, then the value head.
  const auto q_row = [&](std::int64_t r) { return (r / hd / g) * (g + 2) * hd + (r / hd % g) * hd + r % hd; };
  const auto kv_row = [&](std::int64_t part) {
    return [=](std::int64_t r) { return (r / hd) * (g + 2) * hd + (g + part) * hd + r % hd; };
  };
  for (std::int64_t i = 0; i < c.vocab * C; ++i) pair(at++, full["wte"].offset + i);
  per_layer("ln1_w", C);
  rows("qkv_w", H * hd, q_row);
  rows("qkv_w", K * hd, kv_row(0));
  rows("qkv_w", K * hd, kv_row(1));
  transposed("proj_wt", H * hd);
  per_layer("ln2_w", C);
  rows("fc1_w", F, [](std::int64_t r) { return 2 * r; });      // w1: gate rows
  transposed("fc2_wt", F);                                       // w2
  rows("fc1_w", F, [](std::int64_t r) { return 2 * r + 1; });  // w3: up rows
  for (std::int64_t i = 0; i < C; ++i) pair(at++, full["lnf_w"].offset + i);
  const std::int64_t classifier = at;
  if (with_classifier)
    for (std::int64_t i = 0; i < c.vocab * C; ++i) pair(at++, full["lm_head"].offset + i);
  if (with_classifier && at != full.size())
    throw std::logic_error("llama2.c layout does not cover the model");
  return classifier;
}

struct Header {
  GptConfig config;
  bool shared = false;
};

Header header_from(const std::string& path, const std::int32_t* h) {
  static const char* kFields[] = {"header[0] dim",     "header[1] hidden_dim", "header[2] n_layers",
                                  "header[3] n_heads", "header[4] n_kv_heads", "header[5] vocab_size",
                                  "header[6] seq_len"};
  for (int i = 0; i < 7; ++i)
    if (i != 5 && h[i] <= 0) fail_file(path, kFields[i], "is " + std::to_string(h[i]) + ", must be > 0");
  if (h[5] == 0 || h[5] == std::numeric_limits<std::int32_t>::min())
    fail_file(path, kFields[5], "is " + std::to_string(h[5]) + ", must be non-zero");
  if (h[0] % h[3] != 0)
    fail_file(path, kFields[3], std::to_string(h[3]) + " does not divide dim " + std::to_string(h[0]));
  if (h[3] % h[4] != 0)
    fail_file(path, kFields[4], std::to_string(h[4]) + " does not divide n_heads " + std::to_string(h[3]));
  if ((h[0] / h[3]) % 2 != 0)
    fail_file(path, kFields[3], "gives an odd head size " + std::to_string(h[0] / h[3]) + " (RoPE rotates pairs)");
  Header out;
  const std::int64_t vocab = std::abs(static_cast<std::int64_t>(h[5]));
  out.config = GptConfig{vocab, vocab, h[2], h[0], h[3], h[6]};
  out.config.family = Family::kLlama;
  out.config.kv_heads = h[4];
  out.config.ffn_hidden = h[1];
  out.shared = h[5] > 0;
  try {
    out.config.validate();
  } catch (const std::invalid_argument& e) {
    fail_file(path, "header", e.what());
  }
  return out;
}

std::uint64_t rope_floats(const GptConfig& c) {
  return static_cast<std::uint64_t>(c.max_seq * c.head_dim());  // real and imaginary halves
}

// Floats after the header: the parameters, the RoPE tables, the classifier if separate.
std::uint64_t payload_floats(const Header& h) {
  const GptConfig& c = h.config;
  const auto classifier = static_cast<std::uint64_t>(c.vocab * c.d_model);
  return static_cast<std::uint64_t>(parameter_count(c)) - classifier + rope_floats(c) +
         (h.shared ? 0 : classifier);
}

constexpr std::uint64_t kPayload = kLlama2cHeaderInts * 4;

Header read_checked_header(const PositionedFile& in) {
  std::int32_t raw[kLlama2cHeaderInts];
  in.read(0, raw, kPayload, "header");
  const Header h = header_from(in.path(), raw);
  const std::uint64_t expected = payload_floats(h) * sizeof(float) + kPayload;
  if (in.size() != expected)
    fail_file(in.path(), "size", "file has " + std::to_string(in.size()) + " bytes, the header (" +
                                     (h.shared ? "shared" : "separate") + " classifier) promises " +
                                     std::to_string(expected));
  return h;
}

// Where each tensor of the full layout lies in the payload (floats): the
// same walk as for_each_element, by ranges. A KV group's qkv_w is its query
// rows of wq, its key rows of wk and its value rows of wv; a SwiGLU neuron's
// fc1_w its gate row of w1 and its up row of w3.
std::vector<TensorSource> llama2c_sources(const Header& h) {
  const GptConfig& c = h.config;
  const ParameterLayout full(c, Shard::full(c));
  std::vector<TensorSource> sources(full.tensors().size());
  const std::int64_t C = c.d_model, L = c.layers, F = c.ffn(), hd = c.head_dim();
  const std::int64_t H = c.heads, K = c.kv_heads, g = c.queries_per_group();
  const auto set = [&](const std::string& name, TensorSource source) { sources[full.index_of(name)] = std::move(source); };
  const auto layer = [](std::int64_t l, const char* name) { return "h" + std::to_string(l) + "." + name; };
  std::int64_t at = 0;
  const auto take = [&](std::int64_t per_layer) {  // the start of the next [L, per_layer] tensor
    const std::int64_t start = at;
    at += L * per_layer;
    return start;
  };
  set("wte", TensorSource::in_blocks({{0, C}}));
  at += c.vocab * C;
  const std::int64_t rms_att = take(C), wq = take(H * hd * C), wk = take(K * hd * C), wv = take(K * hd * C);
  const std::int64_t wo = take(C * H * hd), rms_ffn = take(C), w1 = take(F * C), w2 = take(C * F), w3 = take(F * C);
  set("lnf_w", TensorSource::in_blocks({{at, C}}));
  at += C + static_cast<std::int64_t>(rope_floats(c));
  set("lm_head", TensorSource::in_blocks({{h.shared ? 0 : at, C}}));
  for (std::int64_t l = 0; l < L; ++l) {
    set(layer(l, "ln1_w"), TensorSource::in_blocks({{rms_att + l * C, C}}));
    set(layer(l, "qkv_w"), TensorSource::in_blocks({{wq + l * H * hd * C, g * hd * C},
                                                    {wk + l * K * hd * C, hd * C},
                                                    {wv + l * K * hd * C, hd * C}}));
    set(layer(l, "proj_wt"), TensorSource::transposed(wo + l * C * H * hd, C, H * hd, g * hd));
    set(layer(l, "ln2_w"), TensorSource::in_blocks({{rms_ffn + l * C, C}}));
    set(layer(l, "fc1_w"), TensorSource::in_blocks({{w1 + l * F * C, C}, {w3 + l * F * C, C}}));
    set(layer(l, "fc2_wt"), TensorSource::transposed(w2 + l * C * F, C, F, 1));
  }
  return sources;
}

}  // namespace

GptConfig read_llama2c_config(const std::string& path) { return read_checked_header(PositionedFile(path)).config; }

void read_llama2c_shard(const std::string& path, const ParameterLayout& layout, std::span<float> values) {
  const PositionedFile in(path);
  const Header h = read_checked_header(in);
  read_shard(in, h.config, kPayload, llama2c_sources(h), layout, values);
}

LlmcCheckpoint read_llama2c_checkpoint(const std::string& path) {
  LlmcCheckpoint out{read_llama2c_config(path), {}};
  const ParameterLayout full(out.config, Shard::full(out.config));
  out.params.resize(static_cast<std::size_t>(full.size()));
  read_llama2c_shard(path, full, out.params);
  return out;
}

void require_llama2c_defaults(const GptConfig& c) {
  const auto require = [](const char* key, float value, float assumed) {
    if (value != assumed)
      throw std::invalid_argument(std::string("llama2.c's format has no field for ") + key + ": the model's is " +
                                  float_text(value) + ", every reader of the file would assume " +
                                  float_text(assumed));
  };
  require("rope_theta", c.rope_theta, kDefaultRopeTheta);
  require("norm_eps", c.norm_eps, kDefaultNormEps);
}

void write_llama2c_checkpoint(const std::string& path, const GptConfig& c,
                              std::span<const float> full_params) {
  c.validate();
  if (!c.llama() || c.padded_vocab != c.vocab)
    throw std::invalid_argument("write_llama2c_checkpoint: needs a Llama model without padding rows");
  if (full_params.size() != static_cast<std::size_t>(parameter_count(c)))
    throw std::invalid_argument("write_llama2c_checkpoint: parameter count does not match the config");
  const ParameterLayout full(c, Shard::full(c));
  const auto wte = full_params.subspan(static_cast<std::size_t>(full["wte"].offset),
                                       static_cast<std::size_t>(full["wte"].count));
  const auto head = full_params.subspan(static_cast<std::size_t>(full["lm_head"].offset),
                                        static_cast<std::size_t>(full["lm_head"].count));
  const bool shared = std::equal(wte.begin(), wte.end(), head.begin(), head.end(),
                                 [](float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); });
  std::vector<float> file(full_params.size());
  const std::int64_t classifier = for_each_element(c, true, [&](std::int64_t f, std::int64_t ours) {
    file[static_cast<std::size_t>(f)] = full_params[static_cast<std::size_t>(ours)];
  });
  const tensor::RopeTable rope = tensor::rope_table(c.max_seq, c.head_dim(), c.rope_theta);
  std::vector<float> tables(rope.cos);
  tables.insert(tables.end(), rope.sin.begin(), rope.sin.end());
  file.insert(file.begin() + classifier, tables.begin(), tables.end());
  if (shared) file.resize(file.size() - static_cast<std::size_t>(c.vocab * c.d_model));
  const std::int64_t fields[] = {c.d_model, c.ffn_hidden, c.layers, c.heads, c.kv_heads,
                                 shared ? c.vocab : -c.vocab, c.max_seq};
  std::int32_t header[kLlama2cHeaderInts];
  for (std::size_t i = 0; i < kLlama2cHeaderInts; ++i) header[i] = static_cast<std::int32_t>(fields[i]);
  BinaryWriter out(path);
  out.write(header, sizeof(header));
  out.write(file.data(), file.size() * sizeof(float));
  out.close();
}

}  // namespace ntp::model
