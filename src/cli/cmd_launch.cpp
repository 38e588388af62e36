// `ntp launch`: start N worker processes of any command, torchrun-style, and
// supervise them (docs/launch.md).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <spdlog/spdlog.h>

#include "cli/command.h"
#include "cli/path_args.h"
#include "comm/signal_thread.h"
#include "elastic/job.h"
#include "elastic/log_tee.h"

namespace {

using ntp::elastic::LaunchOptions;

// The launcher's flags end at `--` or at the first word that is not one of
// them; a word starting with '-' there is a flag it does not know.
struct SplitArgs {
  std::vector<std::string> flags;
  std::vector<std::string> command;
  bool separated = false;  // an explicit `--`
};

SplitArgs split_at_separator(int argc, char** argv) {
  SplitArgs out;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--" && !out.separated) {
      out.separated = true;
      continue;
    }
    (out.separated ? out.command : out.flags).emplace_back(argv[i]);
  }
  return out;
}

// Seconds from a flag, checked finite and >= 0 (NaN and negatives are refused).
std::optional<std::string> check_seconds(const char* flag, double seconds) {
  if (std::isfinite(seconds) && seconds >= 0) return std::nullopt;
  return fmt::format("{} {}: must be a finite number of seconds >= 0", flag, seconds);
}

int run_launch(int argc, char** argv) {
  // A reader of stdout that goes away (`| head`, a log collector that died)
  // must not take the job down with it: writes to it just fail.
  ntp::comm::ignore_sigpipe();
  CLI::App app{"Start N worker processes of a command with RANK, WORLD_SIZE, LOCAL_RANK, "
               "LOCAL_WORLD_SIZE, NTP_STORE and MASTER_ADDR/PORT set; report every death.",
               "ntp launch"};
  LaunchOptions options;
  std::string run_dir;
  std::string rdzv_endpoint;
  double straggler_s = 10.0;
  double grace_s = 5.0;
  int tee = 0;
  app.add_option("--nproc,--nproc-per-node,--nproc_per_node", options.nproc, "worker processes on this host")
      ->required();
  auto* nnodes = app.add_option("--nnodes", options.nnodes, "hosts in the job (default 1, or Slurm's)");
  auto* node_rank = app.add_option("--node-rank,--node_rank", options.node_rank, "this host's index");
  auto* store = app.add_option("--store", options.store,
                               "rendezvous store: file:DIR or redis://host:port (default file:RUN_DIR/store)");
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", rdzv_endpoint,
                 "HOST:PORT of the Redis rendezvous store (torchrun's spelling of --store redis://HOST:PORT)")
      ->excludes(store);
  app.add_option("--run-dir", run_dir, "per-rank logs (logs/rank-N.log), events.jsonl and the store")
      ->check(ntp::cli::output_folder());
  app.add_option("--straggler-timeout", straggler_s,
                 "seconds the other workers get to exit after the first failure")
      ->capture_default_str();
  app.add_option("--term-grace", grace_s, "seconds between SIGTERM and SIGKILL")->capture_default_str();
  app.add_option("--tee", tee,
                 "mirror worker output to stdout, each line prefixed with its rank: 0 off; 1, 2 or 3 "
                 "(torchrun's stdout, stderr, both) all mirror the one log that holds both")
      ->expected(0, 1)
      ->default_str("3")
      ->check(CLI::Range(0, 3));
  app.prefix_command();  // the first word that is not a flag starts the worker command
  app.footer("The worker command follows `--` or the last flag: ntp launch --nproc 2 -- python train.py");
  const SplitArgs args = split_at_separator(argc, argv);
  std::vector<std::string> words(args.flags.rbegin(), args.flags.rend());  // CLI11 parses a reversed list
  try {
    app.parse(words);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? ntp::cli::kExitOk : ntp::cli::kExitBadInput;
  }
  options.command = app.remaining();
  if (!options.command.empty() && options.command.front().starts_with("-")) {
    spdlog::error("ntp launch: unknown flag '{}' (the worker command goes after --)", options.command.front());
    return ntp::cli::kExitBadInput;
  }
  // A `--` after the command has begun belongs to the command.
  if (!options.command.empty() && args.separated) options.command.emplace_back("--");
  options.command.insert(options.command.end(), args.command.begin(), args.command.end());
  for (const auto& bad : {check_seconds("--straggler-timeout", straggler_s), check_seconds("--term-grace", grace_s)}) {
    if (!bad) continue;
    spdlog::error("ntp launch: {}", *bad);
    return ntp::cli::kExitBadInput;
  }

  if (run_dir.empty()) run_dir = "/tmp/ntp-launch-" + std::to_string(::getpid());
  if (!rdzv_endpoint.empty()) options.store = "redis://" + rdzv_endpoint;
  if (options.store.empty()) options.store = "file:" + run_dir + "/store";
  options.log_dir = std::filesystem::path(run_dir) / "logs";
  options.straggler_timeout = std::chrono::milliseconds(static_cast<long>(straggler_s * 1000));
  options.term_grace = std::chrono::milliseconds(static_cast<long>(grace_s * 1000));
  ntp::elastic::apply_slurm_nodes(options, ntp::elastic::current_environment(),
                                  nnodes->count() > 0 || node_rank->count() > 0);
  try {
    ntp::elastic::validate(options);
  } catch (const std::invalid_argument& e) {
    spdlog::error("ntp launch: {}", e.what());
    return ntp::cli::kExitBadInput;
  }
  if (options.nnodes > 1 && options.store.starts_with("file:")) {
    spdlog::warn("ntp launch: warning: a file store ({}) with --nnodes {} works only if every host sees the "
                 "same folder (a shared file system); otherwise use --store redis://HOST:PORT",
                 options.store, options.nnodes);
  }
  std::filesystem::create_directories(run_dir);
  spdlog::info("ntp launch: {} workers, store {}, logs in {}", options.nproc, options.store,
               options.log_dir.string());
  spdlog::debug("ntp launch: worker command: {}", fmt::join(options.command, " "));
  std::optional<ntp::elastic::LogTee> mirror;
  if (tee > 0) {
    std::vector<int> ranks;
    for (int local = 0; local < options.nproc; ++local) ranks.push_back(options.global_rank(local));
    mirror.emplace(options.log_dir, ranks, stdout);
    options.on_tick = [&mirror] { mirror->poll(); };
  }
  ntp::elastic::LaunchResult result;
  try {
    result = ntp::elastic::run_job(options, {std::filesystem::path(run_dir) / "events.jsonl", stderr, "ntp launch"});
  } catch (const ntp::elastic::ExecError& e) {
    spdlog::error("ntp launch: {}", e.what());
    return ntp::cli::kExitBadInput;
  }
  if (mirror) mirror->finish();
  if (result.ok()) return ntp::cli::kExitOk;
  spdlog::error("ntp launch: the job failed\n{}", result.report());
  return ntp::cli::kExitFailure;
}

}  // namespace

NTP_REGISTER_COMMAND("launch", "start and supervise N worker processes (torchrun-style)", run_launch);
