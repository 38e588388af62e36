#include "train/model_setup.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "model/llama2c_checkpoint.h"
#include "model/llmc_checkpoint.h"
#include "model/model_file.h"
#include "tensor/gpu.h"

namespace ntp::train {
namespace {

// A key set in the config must match the checkpoint's value.
void agree(const char* key, std::int64_t set, std::int64_t checkpoint, const std::string& path) {
  if (set != 0 && set != checkpoint) {
    throw ConfigError(fmt::format("{} = {}, but the checkpoint model.init_from = '{}' has {}", key,
                                  set, path, checkpoint));
  }
}

void apply(std::int64_t value, std::int64_t& field) {
  if (value != 0) field = value;
}

}  // namespace

ModelSetup resolve_model(const ModelConfig& keys, std::int32_t data_max_token) {
  ModelSetup setup;
  if (!keys.init_from.empty()) {
    // The file says its format, and so the family: llm.c for GPT-2, llama2.c
    // for Llama. model.family's default (gpt2) yields to it; a "llama" the
    // file contradicts is a mistake to name.
    model::ModelFileHeader file;
    try {
      file = model::read_model_header(keys.init_from);
    } catch (const std::runtime_error& e) {
      throw ConfigError(fmt::format("model.init_from: {}", e.what()));
    }
    if (keys.family == model::Family::kLlama && !file.config.llama()) {
      throw ConfigError(fmt::format("model.family = \"llama\", but model.init_from = '{}' holds a {} model ({}'s "
                                    "format): set model.family = \"{}\" or leave the key out (the file says the family)",
                                    keys.init_from, model::to_string(file.config.family), model::to_string(file.format),
                                    model::to_string(file.config.family)));
    }
    setup.gpt = file.config;
    agree("model.vocab", keys.vocab, setup.gpt.vocab, keys.init_from);
    agree("model.layers", keys.layers, setup.gpt.layers, keys.init_from);
    agree("model.d_model", keys.d_model, setup.gpt.d_model, keys.init_from);
    agree("model.heads", keys.heads, setup.gpt.heads, keys.init_from);
    agree("model.kv_heads", keys.kv_heads, setup.gpt.kv_heads, keys.init_from);
    agree("model.ffn_hidden", keys.ffn_hidden, setup.gpt.ffn_hidden, keys.init_from);
  } else {
    try {
      setup.gpt = model::preset(keys.preset, keys.family);
    } catch (const std::invalid_argument& e) {
      throw ConfigError(fmt::format("model.preset: {}", e.what()));
    }
    if (keys.vocab != 0) {
      setup.gpt.vocab = keys.vocab;
      setup.gpt.padded_vocab = keys.vocab;
    }
    apply(keys.layers, setup.gpt.layers);
    apply(keys.d_model, setup.gpt.d_model);
    apply(keys.heads, setup.gpt.heads);
    apply(keys.seq_len, setup.gpt.max_seq);
    apply(keys.kv_heads, setup.gpt.kv_heads);
    apply(keys.ffn_hidden, setup.gpt.ffn_hidden);
    try {
      setup.gpt.validate();
    } catch (const std::invalid_argument& e) {
      throw ConfigError(fmt::format("model: {}", e.what()));
    }
  }
  if (setup.gpt.llama()) {
    // Keys, not the checkpoint: llama2.c's format has no field for them (its
    // readers assume the defaults, which are also the keys' defaults).
    setup.gpt.rope_theta = static_cast<float>(keys.rope_theta);
    setup.gpt.norm_eps = static_cast<float>(keys.norm_eps);
  }
  setup.seq_len = keys.seq_len != 0 ? keys.seq_len : setup.gpt.max_seq;
  if (setup.seq_len > setup.gpt.max_seq) {
    throw ConfigError(fmt::format("model.seq_len = {} exceeds the model's {} positions",
                                  setup.seq_len, setup.gpt.max_seq));
  }
  if (data_max_token >= setup.gpt.vocab) {
    throw ConfigError(fmt::format("data.path: token id {} is outside the model.vocab of {}",
                                  data_max_token, setup.gpt.vocab));
  }
  return setup;
}

std::string describe_model(const ModelConfig& keys) {
  const std::string source = keys.init_from.empty() ? keys.preset : keys.init_from;
  model::GptConfig gpt;
  try {
    gpt = resolve_model(keys, -1).gpt;  // no data: every token id fits
  } catch (const std::exception& e) {
    return fmt::format("{} ({})", source, e.what());
  }
  const std::string kv = gpt.llama() ? fmt::format(", {} KV heads", gpt.kv_heads) : "";
  return fmt::format("{} ({}: {} layer{}, {} heads{}, hidden {}, vocab {}, {:.1f}M parameters)", source,
                     model::to_string(gpt.family), gpt.layers, gpt.layers == 1 ? "" : "s", gpt.heads, kv,
                     gpt.d_model, gpt.vocab,
                     static_cast<double>(model::parameter_count(gpt)) / 1e6);
}

void init_model(const ModelConfig& keys, std::uint64_t seed, model::Model& model) {
  if (keys.init_from.empty()) {
    model.init(seed);
    return;
  }
  try {
    model::read_model_shard(keys.init_from, model.layout(), model.params());
  } catch (const std::runtime_error& e) {
    throw ConfigError(fmt::format("model.init_from: {}", e.what()));
  }
}

model::AdamWConfig adamw_config(const OptimConfig& t) {
  model::AdamWConfig c;
  c.lr = static_cast<float>(t.lr);
  c.beta1 = static_cast<float>(t.beta1);
  c.beta2 = static_cast<float>(t.beta2);
  c.eps = static_cast<float>(t.eps);
  c.weight_decay = static_cast<float>(t.weight_decay);
  c.grad_clip = static_cast<float>(t.grad_clip);
  return c;
}

namespace {
int host_cores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }
}  // namespace

void warn_if_oversubscribed(const ModelConfig& keys, int ranks_on_host) {
  const tensor::ThreadSetup setup = thread_setup(keys, ranks_on_host);
  const int cores = host_cores();
  // One thread a rank starts no pool worker: nothing polls, however many ranks share the cores.
  if (setup.threads <= 1 || setup.threads * ranks_on_host <= cores) return;
  spdlog::warn("model.threads = {} with {} ranks on this host is {} kernel threads on {} cores: ranks will "
               "compete for cores (each pool thread polls up to {} us between loops); 0 picks cores / ranks",
               setup.threads, ranks_on_host, setup.threads * ranks_on_host, cores,
               tensor::ThreadPool::kSpin.count());
}

tensor::ThreadSetup thread_setup(const ModelConfig& keys, int ranks_on_host) {
  const int threads =
      keys.threads > 0 ? static_cast<int>(keys.threads) : std::max(1, host_cores() / ranks_on_host);
  return {.threads = threads,
          .gemm = keys.gemm,
          .cuda = keys.device == tensor::Device::kCuda,
          .precision = keys.precision};
}

void check_device(const ModelConfig& keys) {
  if (keys.device != tensor::Device::kCuda) return;  // no CUDA call on a CPU run
  const bool built = tensor::cuda_built();
  check_device(keys.device, built, built ? tensor::Gpu::count() : 0);
}

void check_device(tensor::Device device, bool cuda_built, int visible) {
  if (device != tensor::Device::kCuda) return;
  if (!cuda_built) {
    throw ConfigError("model.device: \"cuda\", but this build has no CUDA (no toolkit was found at configure "
                      "time); use model.device = \"cpu\"");
  }
  if (visible < 1) {
    const char* mask = std::getenv("CUDA_VISIBLE_DEVICES");
    throw ConfigError(fmt::format("model.device: \"cuda\", but no CUDA device visible (CUDA_VISIBLE_DEVICES{}); "
                                  "use model.device = \"cpu\"",
                                  mask != nullptr ? fmt::format("=\"{}\"", mask) : " unset: no driver or no GPU?"));
  }
}

}  // namespace ntp::train
