// Entry point of the `ntp` command: dispatches to the registered subcommands.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "cli/command.h"
#include "cli/logging.h"
#include "comm/signal_thread.h"
#include "elastic/crash_report.h"

namespace ntp::cli {

std::map<std::string, Command>& command_registry() {
  static std::map<std::string, Command> registry;
  return registry;
}

CommandRegistrar::CommandRegistrar(Command command) {
  std::string name = command.name;
  command_registry().emplace(std::move(name), std::move(command));
}

namespace {

void print_usage(std::FILE* out) {
  std::fprintf(out, "usage: ntp <command> [options]\n\ncommands:\n");
  for (const auto& [name, command] : command_registry()) {
    std::fprintf(out, "  %-10s %s\n", name.c_str(), command.summary.c_str());
  }
  std::fprintf(out, "\n`ntp <command> --help` describes a command's options.\n");
  std::fprintf(out, "Every command takes --quiet (warnings and errors only) or --verbose (debug);\n"
                    "NTP_LOG_LEVEL=trace|debug|info|warn|error|off sets the level too.\n");
}

}  // namespace
}  // namespace ntp::cli

int main(int argc, char** argv) {
  using namespace ntp::cli;
  // Before any thread starts: a signal handler must never run on a thread
  // that computes (see comm/signal_thread.h).
  ntp::comm::route_signals_to_one_thread();
  ntp::elastic::install_crash_report();  // a crash says what and where, in every command
  if (argc < 2) {
    print_usage(stderr);
    return kExitBadInput;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    print_usage(stdout);
    return kExitOk;
  }
  if (name == "--version" || name == "version") {
    std::printf("ntp %s\n", NTP_VERSION);
    return kExitOk;
  }
  auto it = command_registry().find(name);
  if (it == command_registry().end()) {
    std::fprintf(stderr, "ntp: unknown command '%s'\n\n", name.c_str());
    print_usage(stderr);
    return kExitBadInput;
  }
  std::vector<std::string> words(argv + 2, argv + argc);
  try {
    words = setup_logging(words);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "ntp: %s\n", e.what());
    return kExitBadInput;
  }
  std::string program = "ntp " + name;
  std::vector<char*> args;
  args.push_back(program.data());
  for (std::string& word : words) args.push_back(word.data());
  try {
    return it->second.run(static_cast<int>(args.size()), args.data());
  } catch (const std::exception& e) {
    spdlog::error("ntp {}: error: {}", name, e.what());
    return kExitFailure;
  }
}
