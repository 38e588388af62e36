// `ntp export CHECKPOINT --llmc model.bin` (GPT-2) or `--llama2c model.bin`
// (Llama): write a checkpoint's parameters as the llm.c or llama2.c checkpoint
// (fp32; the formats model.init_from reads).
// CHECKPOINT is a checkpoint folder or a run directory (its newest); an llm.c
// or llama2.c file there is refused saying which it is. Exit 0,
// 1 on an I/O failure, 2 on a bad or incomplete checkpoint (named), 3 when the
// format cannot hold the model (llama2.c: a non-default RoPE base or RMSNorm
// epsilon).
#include <cstdio>
#include <filesystem>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "cli/command.h"
#include "model/llama2c_checkpoint.h"
#include "model/llmc_checkpoint.h"
#include "model/model_file.h"
#include "train/checkpoint.h"

namespace {

int run_export(int argc, char** argv) {
  CLI::App app{"Write a checkpoint's parameters in another format.", "ntp export"};
  std::string source;
  std::string llmc;
  std::string llama2c;
  bool check = true;
  app.add_option("checkpoint", source, "a checkpoint folder, or a run directory (its newest checkpoint)")
      ->required();
  auto* llmc_opt = app.add_option("--llmc", llmc, "write the llm.c GPT-2 checkpoint (fp32) to this file");
  auto* llama2c_opt = app.add_option("--llama2c", llama2c, "write the llama2.c Llama checkpoint (fp32) to this file");
  llmc_opt->excludes(llama2c_opt);
  app.add_flag("!--no-checksums", check, "skip reading every byte to compare the checksums");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? ntp::cli::kExitOk : ntp::cli::kExitBadInput;
  }
  if (llmc.empty() && llama2c.empty()) {
    spdlog::error("ntp export: one of --llmc (GPT-2) or --llama2c (Llama) is required");
    return ntp::cli::kExitBadInput;
  }
  // An llm.c or llama2.c file is what export writes, not what it reads: say which it is.
  if (std::filesystem::is_regular_file(source)) {
    try {
      const ntp::model::ModelFileHeader file = ntp::model::read_model_header(source);
      spdlog::error("ntp export: {}: a checkpoint in {}'s format ({}), not a checkpoint folder: ntp export "
                    "reads a checkpoint folder or a run directory; the file is already what {} writes (use it as "
                    "model.init_from or with ntp sample)",
                    source, ntp::model::to_string(file.format), ntp::model::to_string(file.config),
                    file.config.llama() ? "--llama2c" : "--llmc");
    } catch (const std::exception& e) {
      spdlog::error("ntp export: {} (and not a checkpoint folder or a run directory, which ntp export reads)",
                    e.what());
    }
    return ntp::cli::kExitBadInput;
  }
  try {
    std::vector<std::string> skipped;
    const ntp::train::Checkpoint checkpoint =
        ntp::train::Checkpoint::open(ntp::train::resolve_checkpoint(source, &skipped));
    for (const std::string& damaged : skipped) spdlog::warn("ntp export: skipping a damaged checkpoint, {}", damaged);
    if (check) checkpoint.verify_checksums();
    const ntp::model::GptConfig& gpt = checkpoint.info().model;
    if (!llama2c.empty() && gpt.llama()) {
      try {
        ntp::model::require_llama2c_defaults(gpt);
      } catch (const std::invalid_argument& e) {
        spdlog::error("ntp export: --llama2c: {} (model.rope_theta and model.norm_eps must keep their defaults "
                      "to export this format)", e.what());
        return ntp::cli::kExitImpossible;
      }
    }
    const ntp::model::ParameterLayout full(gpt, ntp::model::Shard::full(gpt));
    std::vector<float> params(static_cast<std::size_t>(full.size()));
    std::vector<float> m(params.size());
    std::vector<float> v(params.size());
    checkpoint.load(full, params, m, v);
    const bool to_llama2c = !llama2c.empty();
    if (to_llama2c != gpt.llama()) {
      spdlog::error("ntp export: {}: the checkpoint holds a {} model; use {}", to_llama2c ? "--llama2c" : "--llmc",
                    ntp::model::to_string(gpt.family), gpt.llama() ? "--llama2c" : "--llmc");
      return ntp::cli::kExitBadInput;
    }
    const std::string& out = to_llama2c ? llama2c : llmc;
    if (to_llama2c) ntp::model::write_llama2c_checkpoint(out, gpt, params);
    else ntp::model::write_llmc_checkpoint(out, gpt, params);
    std::printf("wrote %s: %s, step %lld (from %s)\n", out.c_str(), ntp::model::to_string(gpt).c_str(),
                static_cast<long long>(checkpoint.info().step), checkpoint.dir().string().c_str());
    return ntp::cli::kExitOk;
  } catch (const ntp::train::CheckpointError& e) {
    spdlog::error("ntp export: {}", e.what());
    return ntp::cli::kExitBadInput;
  } catch (const std::exception& e) {
    spdlog::error("ntp export: {}", e.what());
    return ntp::cli::kExitFailure;
  }
}

}  // namespace

NTP_REGISTER_COMMAND("export", "write a checkpoint's parameters as an llm.c (GPT-2) or llama2.c (Llama) checkpoint",
                     run_export);
