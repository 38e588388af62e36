// `ntp train`: train a model from a TOML configuration (docs/train.md,
// docs/config.md). With no arguments it runs the built-in demo.
#include <CLI/CLI.hpp>

#include <chrono>
#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "cli/command.h"
#include "cli/path_args.h"
#include "cli/run_report.h"
#include "comm/signal_thread.h"
#include "elastic/launcher.h"
#include "elastic/train_job.h"
#include "train/checkpoint.h"
#include "train/run_dir.h"
#include "train/verify.h"

namespace {

// The settings a resumed run may change: where and how it runs, not what it
// computes (model, data, optimizer and schedule must stay those of the
// checkpoint, or the run would not continue the same training).
bool may_change_on_resume(const std::string& key) {
  for (const char* prefix : {"parallel.", "elastic.", "deadline.", "sync.", "power.", "run.", "test.",
                             "train.checkpoint_", "train.keep_checkpoints", "train.micro_batch", "train.on_nan",
                             "model.threads", "model.device"}) {
    if (key.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

// The configuration of `ntp train --resume PATH`: the checkpoint's, with the
// overrides; run.resume names the checkpoint. Throws ConfigError naming a key
// that must not change, CheckpointError naming what is wrong with PATH.
ntp::train::Config resume_config(const std::string& path, std::vector<std::string> overrides) {
  std::vector<std::string> skipped;
  const std::filesystem::path checkpoint = std::filesystem::absolute(ntp::train::resolve_checkpoint(path, &skipped));
  for (const std::string& damaged : skipped) {
    spdlog::warn("ntp train: --resume: skipping a damaged checkpoint, {}", damaged);
  }
  const ntp::train::Checkpoint opened = ntp::train::Checkpoint::open(checkpoint);
  const std::string saved_file = opened.config_file().string();
  const ntp::train::Config saved = ntp::train::load_config(saved_file, {});
  overrides.push_back(fmt::format("run.resume=\"{}\"", checkpoint.string()));
  const ntp::train::Config config = ntp::train::load_config(saved_file, overrides);
  for (const std::string& change : ntp::train::differing_keys(saved, config)) {
    const std::string key = change.substr(0, change.find(':'));
    if (!may_change_on_resume(key)) {
      throw ntp::train::ConfigError(fmt::format("--resume: {} cannot change when resuming ({}): the checkpoint "
                                                "continues the same model, data and optimizer",
                                                key, change.substr(change.find(':') + 2)));
    }
  }
  return config;
}

// The run's picture; a run that trained is not failed by its report.
void write_report(const std::filesystem::path& run_dir) {
  try {
    std::printf("report: %s\n", ntp::cli::write_run_report(run_dir).string().c_str());
  } catch (const std::exception& e) {
    spdlog::warn("ntp train: no report: {}", e.what());
  }
}

// Slurm's node count and index when one ntp train runs per node and the
// flags do not give them; under Slurm its job id names the job.
void apply_slurm_nodes(ntp::elastic::NodeOptions& node, bool nodes_given) {
  ntp::elastic::LaunchOptions slurm;
  slurm.nnodes = node.nnodes;
  slurm.node_rank = node.node_rank;
  slurm.store = node.store;
  ntp::elastic::apply_slurm_nodes(slurm, ntp::elastic::current_environment(), nodes_given);
  node.nnodes = slurm.nnodes;
  node.node_rank = slurm.node_rank;
  node.store = slurm.store;
}

int run_train(int argc, char** argv) {
  // A reader of stdout that goes away (`| head`, a log collector that died)
  // must not take the job down with it: writes to it just fail.
  ntp::comm::ignore_sigpipe();
  CLI::App app{"Train a GPT with data parallelism over (nonuniform) tensor-parallel replicas.",
               "ntp train"};
  std::string config_path;
  std::vector<std::string> overrides;
  std::string run_dir;
  std::string resume;
  bool verify = false;
  bool worker = false;
  app.add_option("--config", config_path, "run configuration (TOML); default: the built-in demo")
      ->check(ntp::cli::input_file());
  app.add_option("--set", overrides, "override one key: --set train.lr=1e-3 (repeatable)");
  app.add_option("--run-dir", run_dir, "run directory (default: run.dir, else runs/<UTC time>)")
      ->check(ntp::cli::output_folder());
  app.add_option("--resume", resume,
                 "continue from a checkpoint: a run directory (its newest) or a checkpoint folder; at any "
                 "layout (--set parallel.*); continues in the checkpoint's run directory");
  bool print_config = false;
  app.add_flag("--print-config", print_config,
               "print the resolved configuration (every key with its value, TOML) and exit");
  auto* verify_flag = app.add_flag(
      "--verify", verify,
      "after training, replay the schedule at TP = 1, DP = 1 and compare (exit 1 on fail); prints a one-line "
      "verdict, the full result in RUN_DIR/verify.json");
  bool json = false;
  app.add_flag("--json", json, "with --verify: print the verdict as one JSON object instead of the line")
      ->needs(verify_flag);
  ntp::elastic::NodeOptions node;
  auto* nnodes = app.add_option("--nnodes", node.nnodes,
                                "hosts in the job, one ntp train on each (default 1, or Slurm's SLURM_NNODES)");
  auto* node_rank = app.add_option("--node-rank,--node_rank", node.node_rank,
                                   "this host's index in [0, nnodes) (default 0, or SLURM_NODEID)");
  app.add_option("--store", node.store,
                 "redis://HOST:PORT[?job=ID]: the store the hosts meet through; node 0 prints the job id every "
                 "other node must name (default: a file store in the run directory, one host)");
  app.add_option("--iface", node.iface,
                 "network interface or address the workers' Gloo connections bind to (default loopback)");
  // One rank of a multi-process run, as the launcher starts it.
  app.add_flag("--worker", worker)->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? ntp::cli::kExitOk : ntp::cli::kExitBadInput;
  }
  if (worker) return ntp::elastic::run_train_worker(run_dir);
  const bool demo = config_path.empty() && overrides.empty() && resume.empty();
  if (demo) overrides = ntp::elastic::demo_overrides();
  if (!resume.empty() && !config_path.empty()) {
    spdlog::error("ntp train: --config cannot be combined with --resume: the checkpoint's configuration is used; "
                  "change settings with --set");
    return ntp::cli::kExitBadInput;
  }
  ntp::train::Config config;
  try {
    config = resume.empty() ? ntp::train::load_config(config_path, overrides) : resume_config(resume, overrides);
    if (!resume.empty() && run_dir.empty()) {
      if (const auto owner = ntp::train::run_dir_of_checkpoint(config.run.resume)) run_dir = owner->string();
    }
  } catch (const ntp::train::ConfigError& e) {
    spdlog::error("ntp train: bad configuration: {}", e.what());
    return ntp::cli::kExitBadInput;
  } catch (const ntp::train::CheckpointError& e) {
    spdlog::error("ntp train: --resume: {}", e.what());
    return ntp::cli::kExitBadInput;
  }
  if (print_config) {
    std::printf("%s", ntp::train::to_toml(config).c_str());
    return ntp::cli::kExitOk;
  }
  apply_slurm_nodes(node, nnodes->count() > 0 || node_rank->count() > 0);
  try {
    if (node.node_rank > 0) {
      // The job's configuration and run directory are node 0's.
      ntp::elastic::run_train_node(node, std::chrono::milliseconds(static_cast<long>(config.deadline.rendezvous_s * 1000)),
                                   stdout);
      return ntp::cli::kExitOk;
    }
    const auto result = ntp::elastic::run_train_job(
        config, ntp::elastic::choose_run_dir(config, run_dir), verify, stdout, node);
    write_report(result.run_dir);
    if (result.verify) {
      const std::string verdict = json ? result.verify->to_json().dump() : ntp::train::verdict_line(*result.verify);
      std::printf("%s\n", verdict.c_str());
      return result.verify->pass ? ntp::cli::kExitOk : ntp::cli::kExitFailure;
    }
    return ntp::cli::kExitOk;
  } catch (const ntp::train::ConfigError& e) {
    spdlog::error("ntp train: bad configuration: {}", e.what());
    return ntp::cli::kExitBadInput;
  } catch (const ntp::train::CheckpointError& e) {
    spdlog::error("ntp train: checkpoint: {}", e.what());
    return ntp::cli::kExitBadInput;
  } catch (const ntp::train::RunDirBusy& e) {
    spdlog::error("ntp train: {}", e.what());
    return ntp::cli::kExitFailure;
  } catch (const ntp::elastic::RunInterrupted& e) {
    spdlog::error("ntp train: {}", e.what());
    return ntp::cli::kExitInterrupted;
  } catch (const ntp::elastic::PowerUnavailable& e) {
    spdlog::error("ntp train: {}", e.what());
    return ntp::cli::kExitFailure;
  } catch (const ntp::elastic::UnsupportedRequest& e) {
    spdlog::error("ntp train: {}", e.what());
    return ntp::cli::kExitImpossible;
  } catch (const std::invalid_argument& e) {  // --nnodes, --node-rank, --store
    spdlog::error("ntp train: {}", e.what());
    return ntp::cli::kExitBadInput;
  }
}

}  // namespace

NTP_REGISTER_COMMAND("train", "train a model (no arguments: the built-in demo)", run_train);
