#include "model/llmc_checkpoint.h"

#include <stdexcept>

#include "model/binary_file.h"
#include "model/parameters.h"
#include "model/shard.h"
#include "model/shard_read.h"

namespace ntp::model {

namespace {

// Visits every element pair (llm.c index, full-layout index) once, in llm.c's
// order (the llm.c index counts up by one).
template <typename Fn>
void for_each_element(const GptConfig& c, Fn pair) {
  const ParameterLayout full(c, Shard::full(c));
  const std::int64_t C = c.d_model, L = c.layers, F = c.ffn(), hd = c.head_dim();
  std::int64_t at = 0;  // running offset in llm.c's order
  const auto same = [&](std::int64_t ours, std::int64_t count) {
    for (std::int64_t i = 0; i < count; ++i) pair(at + i, ours + i);
    at += count;
  };
  const auto per_layer = [&](const char* name, std::int64_t count) {
    for (std::int64_t l = 0; l < L; ++l) same(full["h" + std::to_string(l) + "." + name].offset, count);
  };
  const auto qkv_row = [&](std::int64_t r) {  // llm.c row -> head-major row
    const std::int64_t part = r / C, head = (r % C) / hd, d = r % hd;
    return head * 3 * hd + part * hd + d;
  };
  const auto transposed = [&](const char* name, std::int64_t rows, std::int64_t cols) {
    for (std::int64_t l = 0; l < L; ++l) {  // llm.c [rows=out][cols=in] -> ours [in][out]
      const std::int64_t base = full["h" + std::to_string(l) + "." + name].offset;
      for (std::int64_t o = 0; o < rows; ++o)
        for (std::int64_t i = 0; i < cols; ++i) pair(at++, base + i * rows + o);
    }
  };
  same(full["wte"].offset, c.padded_vocab * C);
  same(full["wpe"].offset, c.max_seq * C);
  per_layer("ln1_w", C);
  per_layer("ln1_b", C);
  for (std::int64_t l = 0; l < L; ++l) {
    const std::int64_t base = full["h" + std::to_string(l) + ".qkv_w"].offset;
    for (std::int64_t r = 0; r < 3 * C; ++r)
      for (std::int64_t i = 0; i < C; ++i) pair(at++, base + qkv_row(r) * C + i);
  }
  for (std::int64_t l = 0; l < L; ++l) {
    const std::int64_t base = full["h" + std::to_string(l) + ".qkv_b"].offset;
    for (std::int64_t r = 0; r < 3 * C; ++r) pair(at++, base + qkv_row(r));
  }
  transposed("proj_wt", C, C);
  per_layer("proj_b", C);
  per_layer("ln2_w", C);
  per_layer("ln2_b", C);
  per_layer("fc1_w", F * C);
  per_layer("fc1_b", F);
  transposed("fc2_wt", C, F);
  per_layer("fc2_b", C);
  same(full["lnf_w"].offset, C);
  same(full["lnf_b"].offset, C);
  if (at != full.size()) throw std::logic_error("llm.c layout does not cover the model");
}

GptConfig config_from_header(const std::string& path, const std::vector<std::int32_t>& h) {
  if (h[0] != kLlmcCheckpointMagic)
    fail_file(path, "header[0] magic", "is " + std::to_string(h[0]) + ", expected " +
                                           std::to_string(kLlmcCheckpointMagic));
  if (h[1] != kLlmcCheckpointVersion)
    fail_file(path, "header[1] version",
              "is " + std::to_string(h[1]) + ", expected 3 (fp32; bf16 checkpoints unsupported)");
  static const char* kFields[] = {"", "", "header[2] max_seq", "header[3] vocab",
                                  "header[4] layers", "header[5] heads", "header[6] channels",
                                  "header[7] padded_vocab"};
  for (int i = 2; i < 8; ++i)
    if (h[static_cast<std::size_t>(i)] <= 0) fail_file(path, kFields[i], "must be > 0");
  GptConfig c{h[3], h[7], h[4], h[6], h[5], h[2]};
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    fail_file(path, "header", e.what());
  }
  return c;
}

}  // namespace

std::vector<float> to_llmc_order(const GptConfig& config, std::span<const float> full) {
  std::vector<float> out(full.size());
  for_each_element(config, [&](std::int64_t llmc, std::int64_t ours) {
    out[static_cast<std::size_t>(llmc)] = full[static_cast<std::size_t>(ours)];
  });
  return out;
}

std::vector<float> from_llmc_order(const GptConfig& config, std::span<const float> llmc) {
  std::vector<float> out(llmc.size());
  for_each_element(config, [&](std::int64_t l, std::int64_t ours) {
    out[static_cast<std::size_t>(ours)] = llmc[static_cast<std::size_t>(l)];
  });
  return out;
}

namespace {

// Where each tensor of the full layout lies in llm.c's payload (floats). llm.c
// stores every tensor for all layers at once: layer l's slice of a [L, ...]
// tensor follows layer l - 1's.
std::vector<TensorSource> llmc_sources(const GptConfig& c) {
  const ParameterLayout full(c, Shard::full(c));
  std::vector<TensorSource> sources(full.tensors().size());
  const std::int64_t C = c.d_model, L = c.layers, F = c.ffn(), hd = c.head_dim();
  std::int64_t at = 0;  // running offset in llm.c's order
  const auto set = [&](const std::string& name, TensorSource source) { sources[full.index_of(name)] = std::move(source); };
  const auto layer = [](std::int64_t l, const char* name) { return "h" + std::to_string(l) + "." + name; };
  // A tensor in llm.c's own order: `size` floats per layer, `unit` per unit.
  const auto same = [&](const char* name, std::int64_t unit, std::int64_t size) {
    for (std::int64_t l = 0; l < L; ++l) set(layer(l, name), TensorSource::in_blocks({{at + l * size, unit}}));
    at += L * size;
  };
  // llm.c's qkv: all q rows, then all k, then all v; a head unit is its rows of each.
  const auto qkv = [&](const char* name, std::int64_t row) {
    for (std::int64_t l = 0; l < L; ++l) {
      const std::int64_t base = at + l * 3 * C * row;
      set(layer(l, name), TensorSource::in_blocks({{base, hd * row}, {base + C * row, hd * row},
                                                   {base + 2 * C * row, hd * row}}));
    }
    at += L * 3 * C * row;
  };
  // llm.c [out = C][in = cols] per layer; ours stores the in-columns.
  const auto transposed = [&](const char* name, std::int64_t cols, std::int64_t width) {
    for (std::int64_t l = 0; l < L; ++l) set(layer(l, name), TensorSource::transposed(at + l * C * cols, C, cols, width));
    at += L * C * cols;
  };
  set("wte", TensorSource::in_blocks({{at, C}}));
  at += c.padded_vocab * C;
  set("wpe", TensorSource::in_blocks({{at, c.max_seq * C}}));
  at += c.max_seq * C;
  same("ln1_w", C, C);
  same("ln1_b", C, C);
  qkv("qkv_w", C);
  qkv("qkv_b", 1);
  transposed("proj_wt", C, hd);
  same("proj_b", C, C);
  same("ln2_w", C, C);
  same("ln2_b", C, C);
  same("fc1_w", C, F * C);
  same("fc1_b", 1, F);
  transposed("fc2_wt", F, 1);
  same("fc2_b", C, C);
  set("lnf_w", TensorSource::in_blocks({{at, C}}));
  set("lnf_b", TensorSource::in_blocks({{at + C, C}}));
  if (at + 2 * C != full.size()) throw std::logic_error("llm.c sources do not cover the model");
  return sources;
}

constexpr std::uint64_t kPayload = kHeaderInts * 4;

// The header's model, checked against the file's size (the format has no
// checksum: the header and the exact size are all a reader can check without
// reading the parameters).
GptConfig read_checked_header(const PositionedFile& in) {
  std::vector<std::int32_t> header(kHeaderInts);
  in.read(0, header.data(), kPayload, "checkpoint header");
  const GptConfig config = config_from_header(in.path(), header);
  const std::uint64_t bytes = static_cast<std::uint64_t>(parameter_count(config)) * sizeof(float) + kPayload;
  if (bytes > in.size())
    fail_file(in.path(), "parameters", "truncated: header promises " + std::to_string(parameter_count(config)) +
                                           " floats, file has " + std::to_string(in.size()) + " bytes");
  if (bytes < in.size())
    fail_file(in.path(), "parameters",
              std::to_string(in.size() - bytes) + " unexpected trailing bytes after the payload");
  return config;
}

}  // namespace

GptConfig read_llmc_config(const std::string& path) { return read_checked_header(PositionedFile(path)); }

void read_llmc_shard(const std::string& path, const ParameterLayout& layout, std::span<float> values) {
  const PositionedFile in(path);
  const GptConfig config = read_checked_header(in);
  read_shard(in, config, kPayload, llmc_sources(config), layout, values);
}

LlmcCheckpoint read_llmc_checkpoint(const std::string& path) {
  LlmcCheckpoint ckpt{read_llmc_config(path), {}};
  const ParameterLayout full(ckpt.config, Shard::full(ckpt.config));
  ckpt.params.resize(static_cast<std::size_t>(full.size()));
  read_llmc_shard(path, full, ckpt.params);
  return ckpt;
}

void write_llmc_checkpoint(const std::string& path, const GptConfig& c,
                           std::span<const float> full_params) {
  c.validate();
  if (full_params.size() != static_cast<std::size_t>(parameter_count(c)))
    throw std::invalid_argument("write_llmc_checkpoint: parameter count does not match the config");
  std::vector<std::int32_t> header(kHeaderInts, 0);
  const std::int64_t fields[] = {kLlmcCheckpointMagic, kLlmcCheckpointVersion, c.max_seq, c.vocab,
                                 c.layers, c.heads, c.d_model, c.padded_vocab};
  for (std::size_t i = 0; i < 8; ++i) header[i] = static_cast<std::int32_t>(fields[i]);
  BinaryWriter out(path);
  out.write(header.data(), header.size() * sizeof(std::int32_t));
  // In llm.c's order (for_each_element visits it in sequence) through a small
  // buffer: no reordered copy of the whole model (500 MB of fresh pages for
  // GPT-2, which cost more than the disk's write of them).
  std::vector<float> chunk(std::size_t{1} << 18);
  std::size_t n = 0;
  for_each_element(c, [&](std::int64_t, std::int64_t ours) {
    chunk[n++] = full_params[static_cast<std::size_t>(ours)];
    if (n == chunk.size()) {
      out.write(chunk.data(), n * sizeof(float));
      n = 0;
    }
  });
  out.write(chunk.data(), n * sizeof(float));
  out.close();
}

}  // namespace ntp::model
