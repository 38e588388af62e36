#pragma once
// A trained model's file (a run's model.bin, `ntp sample`, `ntp verify`): the
// llm.c checkpoint for GPT-2, the llama2.c checkpoint for Llama. Reading tells
// them apart by the first word, llm.c's magic (20240326), which no llama2.c
// header starts with in practice (it would be the model's width).
#include <span>
#include <string>

#include "model/config.h"
#include "model/llmc_checkpoint.h"

namespace ntp::model {

// Throws std::runtime_error naming the file and field when malformed.
LlmcCheckpoint read_model_file(const std::string& path);
// One rank's values out of the file of `layout`'s model, its family telling
// the format (llm.c for GPT-2, llama2.c for Llama): only the byte ranges of
// the units the layout holds are read. Throws as read_model_file.
void read_model_shard(const std::string& path, const ParameterLayout& layout, std::span<float> values);
// llm.c for GPT-2, llama2.c for Llama.
void write_model_file(const std::string& path, const GptConfig& config, std::span<const float> full_params);

}  // namespace ntp::model
