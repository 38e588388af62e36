#pragma once
// The model of a run: the preset of model.family with the [model] keys
// applied, or the architecture of the checkpoint in model.init_from (llm.c for
// GPT-2, llama2.c for Llama; the set keys must then agree with it), checked
// against the data.
#include <cstdint>
#include <string>

#include "model/config.h"
#include "model/model.h"
#include "model/optimizer.h"
#include "tensor/context.h"
#include "train/config.h"

namespace ntp::train {

struct ModelSetup {
  model::GptConfig gpt;
  std::int64_t seq_len = 0;  // T of every sample (<= gpt.max_seq)
};

// Throws ConfigError naming the key (model.preset, model.vocab, model.seq_len,
// model.init_from, ...) when the model does not fit the keys or the data:
// every token id of the data must be below the vocabulary. Of an init_from
// checkpoint it reads the header alone (and checks the file's size).
ModelSetup resolve_model(const ModelConfig& keys, std::int32_t data_max_token);

// What trains, said wherever the run names its model (the banner,
// run_started, the summary, the report): where it comes from (the checkpoint
// file of model.init_from, else the preset) and its shape, e.g.
// "gpt2_124M.bin (gpt2: 12 layers, 12 heads, hidden 768, vocab 50257, 124.5M
// parameters)". Never throws: a file it cannot read (the job's check refused
// it before anything ran) is named with why, in place of the shape.
std::string describe_model(const ModelConfig& keys);

// The model's first values: the units it holds read straight from
// model.init_from (model::read_model_shard: no full-model buffer), or the
// random init of `seed`. Throws ConfigError naming model.init_from.
void init_model(const ModelConfig& keys, std::uint64_t seed, model::Model& model);

// AdamW settings from the [train] keys.
model::AdamWConfig adamw_config(const OptimConfig& train);

// Kernel threads of one rank: model.threads, or the host's cores shared by
// the `ranks_on_host` processes of the job (at least 1); on a GPU with
// model.device = "cuda" (LOCAL_RANK modulo the visible devices picks it).
tensor::ThreadSetup thread_setup(const ModelConfig& keys, int ranks_on_host);
// The launcher's check of model.device against this host, before any worker
// starts: "cuda" in a build without CUDA, or with no CUDA device visible to
// this process (CUDA_VISIBLE_DEVICES), throws ConfigError naming the key.
// Several ranks may share one GPU, so any count >= 1 will do.
void check_device(const ModelConfig& keys);
// The rule of check_device for a build with(out) CUDA and `visible` devices.
void check_device(tensor::Device device, bool cuda_built, int visible);
// A warning when model.threads was set so that the host's ranks start more
// kernel threads than it has cores.
void warn_if_oversubscribed(const ModelConfig& keys, int ranks_on_host);

}  // namespace ntp::train
