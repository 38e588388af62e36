#pragma once
// A trained model's file (a run's model.bin, model.init_from, `ntp sample`,
// `ntp verify`): the llm.c checkpoint for GPT-2, the llama2.c checkpoint for
// Llama. The file says which it is, so no reader needs to be told: llm.c's
// header starts with its magic (20240326), llama2.c's legacy header has no
// magic but promises sizes that must match the file's to the byte (a
// llama2.c header that starts with the magic would be a model 20240326 wide).
#include <span>
#include <string>

#include "model/config.h"
#include "model/llmc_checkpoint.h"

namespace ntp::model {

enum class ModelFileFormat { kLlmc, kLlama2c };
const char* to_string(ModelFileFormat format);  // "llm.c" | "llama2.c"

struct ModelFileHeader {
  ModelFileFormat format = ModelFileFormat::kLlmc;
  GptConfig config;  // the header's model: GPT-2 for llm.c, Llama for llama2.c
};

// The format and model of the file at `path` from its header and its size
// alone: llm.c when header[0] is llm.c's magic (a bad version or a size that
// does not match the header is then that format's error, "<path>: <field>:
// <why>"); llama2.c when the legacy header is a valid model whose sizes match
// the file exactly. Otherwise throws std::runtime_error naming the file and
// both checks: "<path>: neither an llm.c checkpoint (header[0] magic is 96,
// expected 20240326) nor a llama2.c checkpoint (size: file has ... bytes, the
// header ... promises ...)".
ModelFileHeader read_model_header(const std::string& path);
// The whole model, in the format read_model_header tells. Throws as it does,
// or naming the file and field when the payload cannot be read.
LlmcCheckpoint read_model_file(const std::string& path);
// One rank's values out of the file of `layout`'s model, its family telling
// the format (llm.c for GPT-2, llama2.c for Llama): only the byte ranges of
// the units the layout holds are read. Throws as read_model_file.
void read_model_shard(const std::string& path, const ParameterLayout& layout, std::span<float> values);
// llm.c for GPT-2, llama2.c for Llama.
void write_model_file(const std::string& path, const GptConfig& config, std::span<const float> full_params);

}  // namespace ntp::model
