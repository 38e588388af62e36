#pragma once
// The model of a run: the preset of model.family with the [model] keys
// applied, or the architecture of the checkpoint in model.init_from (llm.c for
// GPT-2, llama2.c for Llama; the set keys must then agree with it), checked
// against the data.
#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/optimizer.h"
#include "tensor/context.h"
#include "train/config.h"

namespace ntp::train {

struct ModelSetup {
  model::GptConfig gpt;
  std::int64_t seq_len = 0;        // T of every sample (<= gpt.max_seq)
  std::vector<float> init_params;  // full unit-major values from init_from; empty = random init
};

// Whether resolve_model reads an init_from checkpoint's parameters or only its
// header (a check before the ranks start, which read the parameters themselves).
enum class CheckpointRead { kParameters, kHeaderOnly };

// Throws ConfigError naming the key (model.preset, model.vocab, model.seq_len,
// model.init_from, ...) when the model does not fit the keys or the data:
// every token id of the data must be below the vocabulary.
ModelSetup resolve_model(const ModelConfig& keys, std::int32_t data_max_token,
                         CheckpointRead read = CheckpointRead::kParameters);

// AdamW settings from the [train] keys.
model::AdamWConfig adamw_config(const OptimConfig& train);

// Kernel threads of one rank: model.threads, or the host's cores shared by
// the `ranks_on_host` processes of the job (at least 1).
tensor::ThreadSetup thread_setup(const ModelConfig& keys, int ranks_on_host);

}  // namespace ntp::train
