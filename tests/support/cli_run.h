#pragma once
// Runs the built `ntp` binary for the command-line tests of every layer:
// exit code, stdout and stderr of one invocation.
#include <string>

namespace ntp::testing {

struct CliRun {
  int exit_code = -1;  // -1: could not start, or killed by a signal
  std::string out;
  std::string err;
};

// `binary args` through the shell. stderr goes through a file named after the
// process id, since CTest runs the tests of a binary in parallel processes.
CliRun run_cli(const std::string& binary, const std::string& args);

}  // namespace ntp::testing
