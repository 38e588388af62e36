#pragma once
// llama2.c's checkpoint, the legacy format of its export.py (fp32): a header
// of 7 int32 {dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
// seq_len}, then token_embedding (V,C), rms_att (L,C), wq (L,H·hd,C),
// wk (L,K·hd,C), wv (L,K·hd,C), wo (L,C,H·hd), rms_ffn (L,C), w1 (L,F,C),
// w2 (L,C,F), w3 (L,F,C), rms_final (C), freq_cis_real and freq_cis_imag
// (seq_len, hd/2 each; RoPE tables that run.c skips), then wcls (V,C) unless
// the classifier is shared with the embedding, which a positive vocab_size
// says (negative: a separate wcls follows).
//
// The conventions match run.c: interleaved-pair RoPE (tensor/rope.h), query
// head h reads KV head h / (H/K), w1 is the gate and w3 the up projection.
// Checkpoints exported from Meta's weights keep their q/k rows as they are
// (Hugging Face's half-split permutation is not applied), so no permutation
// is needed here. Conversion to and from the unit-major full layout
// (ParameterLayout(config, Shard::full(config))) happens here.
#include <span>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/llmc_checkpoint.h"

namespace ntp::model {

constexpr std::size_t kLlama2cHeaderInts = 7;

// Throws std::runtime_error "<path>: <field>: <why>" for a malformed or
// truncated file. A shared classifier is read as an lm_head equal to wte.
LlmcCheckpoint read_llama2c_checkpoint(const std::string& path);
// The header's model alone (the file's exact size checked against it).
GptConfig read_llama2c_config(const std::string& path);
// One rank's values (laid out by `layout`, whose model must be the file's),
// read straight from the byte ranges of the units it holds (model/shard_read.h).
void read_llama2c_shard(const std::string& path, const ParameterLayout& layout, std::span<float> values);
// The format has no field for rope_theta and norm_eps: a reader (run.c, and
// read_llama2c_checkpoint here) assumes kDefaultRopeTheta and kDefaultNormEps.
// Throws std::invalid_argument naming the first that `config` sets otherwise,
// for a writer whose file must stand on its own (`ntp export --llama2c`).
void require_llama2c_defaults(const GptConfig& config);
// Writes a shared classifier (positive vocab_size) when lm_head equals wte
// bit for bit, a separate wcls otherwise. The config must be a Llama whose
// padded_vocab is its vocab (the format has no padding rows). Writes whatever
// rope_theta and norm_eps are (a run's model.bin, whose config.toml holds
// them); require_llama2c_defaults first where the file must say it all.
void write_llama2c_checkpoint(const std::string& path, const GptConfig& config,
                              std::span<const float> full_params);

}  // namespace ntp::model
