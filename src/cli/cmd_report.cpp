// `ntp report RUN_DIR`: the picture of a training run (cli/run_report.h).
#include <cstdio>

#include <CLI/CLI.hpp>

#include <spdlog/spdlog.h>

#include "cli/command.h"
#include "cli/path_args.h"
#include "cli/run_report.h"

namespace {

int run_report(int argc, char** argv) {
  CLI::App app{"Write RUN_DIR/report.html: loss, throughput, exposed sync, and the TP degree of each replica "
               "with failures, recoveries and rejoins over time.",
               "ntp report"};
  std::string run_dir;
  app.add_option("run_dir", run_dir, "the run directory")->required()->check(ntp::cli::input_folder());
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? ntp::cli::kExitOk : ntp::cli::kExitBadInput;
  }
  try {
    std::printf("%s\n", ntp::cli::write_run_report(run_dir).string().c_str());
  } catch (const std::exception& e) {
    spdlog::error("ntp report: {}", e.what());
    return ntp::cli::kExitBadInput;
  }
  return ntp::cli::kExitOk;
}

}  // namespace

NTP_REGISTER_COMMAND("report", "write a run's report.html (loss, throughput, TP degree, failures)", run_report);
