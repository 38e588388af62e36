// `ntp verify RUN_DIR [--json]`: check a finished run directory against a
// single-process replay of its schedule (docs/train.md, "What --verify proves").
// Prints the one-line verdict (the JSON with --json) and writes the full result
// to RUN_DIR/verify.json. Exit 0 pass, 1 fail, 2 bad input (a missing or
// malformed run file, named).
#include <cstdio>

#include <CLI/CLI.hpp>

#include <spdlog/spdlog.h>

#include "cli/command.h"
#include "cli/path_args.h"
#include "train/config.h"
#include "train/verify.h"

namespace {

int run_verify(int argc, char** argv) {
  CLI::App app{"Check a finished run: replay its schedule at TP = 1, DP = 1 and compare every update, "
               "loss, grad norm, sample and unit holder.",
               "ntp verify"};
  std::string run_dir;
  bool json = false;
  app.add_option("run_dir", run_dir, "the run directory")->required()->check(ntp::cli::input_folder());
  app.add_flag("--json", json,
               "print one JSON object (every tensor's worst element, per-step scalars) instead of the verdict line");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? ntp::cli::kExitOk : ntp::cli::kExitBadInput;
  }
  try {
    const ntp::train::VerifyResult result = ntp::train::verify_run(run_dir);
    try {
      ntp::train::write_verify_json(run_dir, result);
    } catch (const std::exception& e) {
      spdlog::warn("ntp verify: {}", e.what());  // a read-only run directory: the verdict is still printed
    }
    const std::string verdict = json ? result.to_json(true).dump() : ntp::train::verdict_line(result);
    std::printf("%s\n", verdict.c_str());
    return result.pass ? ntp::cli::kExitOk : ntp::cli::kExitFailure;
  } catch (const ntp::train::VerifyInputError& e) {
    spdlog::error("ntp verify: {}", e.what());
    return ntp::cli::kExitBadInput;
  } catch (const ntp::train::ConfigError& e) {
    spdlog::error("ntp verify: {}/config.toml: {}", run_dir, e.what());
    return ntp::cli::kExitBadInput;
  }
}

}  // namespace

NTP_REGISTER_COMMAND("verify", "check a finished run against a single-process replay", run_verify);
