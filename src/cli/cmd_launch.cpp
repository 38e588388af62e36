// `ntp launch`: start N worker processes of any command, torchrun-style, and
// supervise them (docs/launch.md).
#include <unistd.h>

#include <CLI/CLI.hpp>

#include "cli/command.h"
#include "cli/path_args.h"
#include "elastic/job.h"

namespace {

using ntp::elastic::LaunchOptions;

int run_launch(int argc, char** argv) {
  CLI::App app{"Start N worker processes of a command with RANK, WORLD_SIZE, LOCAL_RANK, "
               "LOCAL_WORLD_SIZE, NTP_STORE and MASTER_ADDR/PORT set; report every death.",
               "ntp launch"};
  LaunchOptions options;
  std::string run_dir;
  double straggler_s = 10.0;
  double grace_s = 5.0;
  app.add_option("--nproc", options.nproc, "worker processes on this host")->required();
  auto* nnodes = app.add_option("--nnodes", options.nnodes, "hosts in the job (default 1, or Slurm's)");
  auto* node_rank = app.add_option("--node-rank", options.node_rank, "this host's index");
  app.add_option("--store", options.store,
                 "rendezvous store: file:DIR or redis://host:port (default file:RUN_DIR/store)");
  app.add_option("--run-dir", run_dir, "per-rank logs (logs/rank-N.log), events.jsonl and the store")
      ->check(ntp::cli::output_folder());
  app.add_option("--straggler-timeout", straggler_s,
                 "seconds the other workers get to exit after the first failure")
      ->capture_default_str();
  app.add_option("--term-grace", grace_s, "seconds between SIGTERM and SIGKILL")->capture_default_str();
  app.add_option("command", options.command, "worker command and its arguments (after --)")
      ->required();
  app.prefix_command();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? ntp::cli::kExitOk : ntp::cli::kExitBadInput;
  }
  for (const std::string& arg : app.remaining()) options.command.push_back(arg);
  if (!options.command.empty() && options.command.front() == "--") {
    options.command.erase(options.command.begin());
  }

  if (run_dir.empty()) run_dir = "/tmp/ntp-launch-" + std::to_string(::getpid());
  if (options.store.empty()) options.store = "file:" + run_dir + "/store";
  options.log_dir = std::filesystem::path(run_dir) / "logs";
  options.straggler_timeout = std::chrono::milliseconds(static_cast<long>(straggler_s * 1000));
  options.term_grace = std::chrono::milliseconds(static_cast<long>(grace_s * 1000));
  ntp::elastic::apply_slurm_nodes(options, ntp::elastic::current_environment(),
                                  nnodes->count() > 0 || node_rank->count() > 0);
  try {
    ntp::elastic::validate(options);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "ntp launch: %s\n", e.what());
    return ntp::cli::kExitBadInput;
  }
  std::filesystem::create_directories(run_dir);
  std::fprintf(stderr, "ntp launch: %d workers, store %s, logs in %s\n", options.nproc,
               options.store.c_str(), options.log_dir.c_str());
  const ntp::elastic::LaunchResult result = ntp::elastic::run_job(
      options, {std::filesystem::path(run_dir) / "events.jsonl", stderr, "ntp launch"});
  if (result.ok()) return ntp::cli::kExitOk;
  std::fprintf(stderr, "ntp launch: the job failed\n%s", result.report().c_str());
  return ntp::cli::kExitFailure;
}

}  // namespace

NTP_REGISTER_COMMAND("launch", "start and supervise N worker processes (torchrun-style)", run_launch);
