// `ntp sample`: text generation from a trained model (docs/train.md,
// "Samples"). Byte models (vocabulary <= 256) take and print text; larger
// vocabularies take token ids and print ids, or text with --tokenizer.
#include <cstdio>
#include <algorithm>
#include <filesystem>
#include <optional>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <spdlog/spdlog.h>

#include "cli/command.h"
#include "cli/path_args.h"
#include "model/generate.h"
#include "model/model_file.h"
#include "model/model.h"
#include "model/shard.h"
#include "model/tokenizer.h"
#include "tensor/context.h"
#include "train/config.h"

namespace {

constexpr std::int64_t kByteVocab = 256;

// "12 345 6" -> ids; throws std::invalid_argument naming the word.
std::vector<std::int32_t> parse_ids(const std::string& text, std::int64_t vocab) {
  std::vector<std::int32_t> ids;
  std::istringstream words(text);
  for (std::string word; words >> word;) {
    std::size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || id < 0 || id >= vocab) {
      throw std::invalid_argument(fmt::format(
          "--prompt: '{}' is not a token id in [0, {}) (a model of {} tokens takes ids, not text)", word, vocab,
          vocab));
    }
    ids.push_back(static_cast<std::int32_t>(id));
  }
  return ids;
}

// A run's model.bin of a Llama is a llama2.c file, which has no field for the
// RoPE base and RMSNorm epsilon: the run's config.toml holds them (a lone
// llama2.c file gets the defaults every reader of the format assumes).
void apply_run_settings(const std::filesystem::path& run_dir, ntp::model::GptConfig& model) {
  const std::filesystem::path config = run_dir / "config.toml";
  if (!std::filesystem::is_regular_file(config)) return;
  const ntp::train::Config run = ntp::train::read_config_file(config.string());
  model.rope_theta = static_cast<float>(run.model.rope_theta);
  model.norm_eps = static_cast<float>(run.model.norm_eps);
  model.validate();
}

int run_sample(int argc, char** argv) {
  CLI::App app{"Generate text from a trained model: RUN_DIR (its model.bin), an llm.c or a llama2.c checkpoint.",
               "ntp sample"};
  std::string source;
  std::string prompt;
  std::string tokenizer_path;
  std::int64_t tokens = 64;
  double temperature = 1.0;
  std::uint64_t seed = 1337;
  app.add_option("source", source, "a run directory or a model.bin (llm.c GPT-2 or llama2.c Llama checkpoint)")
      ->required()
      ->check(CLI::ExistingPath);
  app.add_option("--prompt", prompt,
                 "text for a byte model; token ids (\"464 2068\") for a larger vocabulary")
      ->required();
  app.add_option("--tokens", tokens, "tokens to generate")->capture_default_str()->check(CLI::Range(1, 1000000));
  app.add_option("--temperature", temperature, "0 = the most likely token; 1 = the model's distribution")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--seed", seed, "seed of the draws")->capture_default_str();
  app.add_option("--tokenizer", tokenizer_path, "llm.c GPT-2 tokenizer file: print text instead of ids")
      ->check(ntp::cli::input_file());
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? ntp::cli::kExitOk : ntp::cli::kExitBadInput;
  }
  const std::filesystem::path checkpoint =
      std::filesystem::is_directory(source) ? std::filesystem::path(source) / "model.bin" : std::filesystem::path(source);
  ntp::model::LlmcCheckpoint loaded;
  std::optional<ntp::model::Tokenizer> tokenizer;
  std::vector<std::int32_t> prompt_ids;
  try {
    loaded = ntp::model::read_model_file(checkpoint.string());
    if (loaded.config.llama() && std::filesystem::is_directory(source)) apply_run_settings(source, loaded.config);
    if (!tokenizer_path.empty()) tokenizer = ntp::model::Tokenizer::read(tokenizer_path);
    const bool bytes = loaded.config.vocab <= kByteVocab && !tokenizer;
    if (bytes) {
      for (unsigned char ch : prompt) prompt_ids.push_back(ch);
    } else {
      prompt_ids = parse_ids(prompt, loaded.config.vocab);
    }
    if (prompt_ids.empty()) throw std::invalid_argument("--prompt: empty");
  } catch (const std::exception& e) {
    spdlog::error("ntp sample: {}", e.what());
    return ntp::cli::kExitBadInput;
  }
  ntp::tensor::Context ctx({1});
  ntp::model::Model model(loaded.config, ntp::model::Shard::full(loaded.config), ctx);
  std::copy(loaded.params.begin(), loaded.params.end(), model.params().begin());
  const std::vector<std::int32_t> out = ntp::model::generate(model, prompt_ids, tokens, temperature, seed);
  if (tokenizer) {
    std::printf("%s%s\n", tokenizer->decode(prompt_ids).c_str(), tokenizer->decode(out).c_str());
  } else if (loaded.config.vocab <= kByteVocab) {
    std::string text = prompt;
    for (std::int32_t id : out) text += static_cast<char>(id);
    std::printf("%s\n", text.c_str());
  } else {
    std::printf("%s\n", fmt::format("{}", fmt::join(out, " ")).c_str());
  }
  return ntp::cli::kExitOk;
}

}  // namespace

NTP_REGISTER_COMMAND("sample", "generate text from a trained model", run_sample);
