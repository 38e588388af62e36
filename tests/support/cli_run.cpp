#include "cli_run.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace ntp::testing {

CliRun run_cli(const std::string& binary, const std::string& args) {
  const std::string err_path =
      ::testing::TempDir() + "ntp_cli_stderr_" + std::to_string(getpid()) + ".txt";
  const std::string command = binary + " " + args + " 2>" + err_path;
  CliRun run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char buffer[4096];
  std::size_t got = 0;
  while ((got = fread(buffer, 1, sizeof buffer, pipe)) > 0) run.out.append(buffer, got);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_path);
  std::stringstream text;
  text << err.rdbuf();
  run.err = text.str();
  std::remove(err_path.c_str());
  return run;
}

}  // namespace ntp::testing
