#pragma once
// The `ntp` command is a set of subcommands (plan, sim, train, launch, bench,
// power, ...). Each lives in its own cmd_*.cpp and registers itself with
// NTP_REGISTER_COMMAND, so adding one touches no other file.
//
// Exit codes shared by every subcommand:
//   0 success, 1 runtime failure, 2 bad input (usage, flags, config),
//   3 the request is valid but cannot be carried out (e.g. units lost).
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ntp::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitImpossible = 3;
inline constexpr int kExitInterrupted = 130;  // stopped by SIGINT/SIGTERM after a checkpoint (128 + SIGINT)

struct Command {
  std::string name;     // first word after `ntp`
  std::string summary;  // one line for `ntp --help`
  // Receives the arguments after the subcommand name; argv[0] is "ntp <name>".
  std::function<int(int argc, char** argv)> run;
};

std::map<std::string, Command>& command_registry();

struct CommandRegistrar {
  explicit CommandRegistrar(Command command);
};

}  // namespace ntp::cli

#define NTP_CONCAT_INNER(a, b) a##b
#define NTP_CONCAT(a, b) NTP_CONCAT_INNER(a, b)
#define NTP_REGISTER_COMMAND(...)                                              \
  static const ::ntp::cli::CommandRegistrar NTP_CONCAT(ntp_command_, __LINE__) \
  {                                                                            \
    ::ntp::cli::Command { __VA_ARGS__ }                                        \
  }
