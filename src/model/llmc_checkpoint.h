#pragma once
// llm.c's GPT-2 checkpoint (fp32): a 256 x int32 header {20240326, 3, maxT, V,
// L, NH, C, Vp, 0...} then the parameters in llm.c's order wte (Vp,C),
// wpe (maxT,C), ln1w, ln1b (L,C), qkvw (L,3C,C), qkvb (L,3C), attprojw (L,C,C),
// attprojb, ln2w, ln2b (L,C), fcw (L,4C,C), fcb (L,4C), fcprojw (L,C,4C),
// fcprojb (L,C), lnfw, lnfb (C). llm.c stores qkvw as all q rows, then all k,
// then all v, and the projections untransposed; conversion to the unit-major
// full layout (ParameterLayout(config, Shard::full(config))) happens here.
#include <span>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/parameters.h"

namespace ntp::model {

constexpr std::int32_t kLlmcCheckpointMagic = 20240326;
constexpr std::int32_t kLlmcCheckpointVersion = 3;  // fp32 (5 is bf16, not supported)

struct LlmcCheckpoint {
  GptConfig config;
  std::vector<float> params;  // full unit-major layout of `config`
};

// Throws std::runtime_error "<path>: <field>: <why>" for a malformed or truncated file.
LlmcCheckpoint read_llmc_checkpoint(const std::string& path);
// The header's model alone, the file's exact size checked against it (the
// format has no checksum): what a check before the ranks start needs, without
// reading the parameters.
GptConfig read_llmc_config(const std::string& path);
// One rank's values (laid out by `layout`, whose model must be the file's),
// read straight from the file's byte ranges of the units it holds
// (model/shard_read.h): no full-model buffer.
void read_llmc_shard(const std::string& path, const ParameterLayout& layout, std::span<float> values);
void write_llmc_checkpoint(const std::string& path, const GptConfig& config,
                           std::span<const float> full_params);

// The permutations between llm.c's order and the full unit-major layout,
// element by element: the writer's, and the reference the shard reader is
// tested against.
std::vector<float> to_llmc_order(const GptConfig& config, std::span<const float> full_params);
std::vector<float> from_llmc_order(const GptConfig& config, std::span<const float> llmc_params);

}  // namespace ntp::model
