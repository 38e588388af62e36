// `ntp launch` and `ntp train` as a user runs them: the real executable.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace {

namespace fs = std::filesystem;

struct CommandResult {
  int code = -1;
  std::string output;  // stdout and stderr
};

CommandResult ntp(const std::string& args) {
  const std::string command = std::string(NTP_BINARY) + " " + args + " 2>&1";
  CommandResult run;
  std::FILE* pipe = ::popen(command.c_str(), "r");
  std::array<char, 4096> buffer{};
  for (std::size_t n; (n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0;) {
    run.output.append(buffer.data(), n);
  }
  const int status = ::pclose(pipe);
  run.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ntp_cli_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(CliTest, LaunchReportsWhoDiedAndExitsNonZero) {
  const CommandResult run = ntp("launch --nproc 3 --straggler-timeout 0.2 --run-dir " + dir_.string() +
                      " -- sh -c 'if [ $RANK = 2 ]; then kill -SEGV $$; fi; sleep 20'");
  EXPECT_EQ(run.code, 1) << run.output;
  EXPECT_NE(run.output.find("rank 2 (pid"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("killed by signal 11"), std::string::npos) << run.output;
  EXPECT_TRUE(fs::exists(dir_ / "logs" / "rank-0.log"));
  EXPECT_TRUE(fs::exists(dir_ / "events.jsonl"));
}

TEST_F(CliTest, LaunchSucceedsWhenEveryWorkerDoes) {
  const CommandResult run = ntp("launch --nproc 2 --run-dir " + dir_.string() + " -- true");
  EXPECT_EQ(run.code, 0) << run.output;
}

TEST_F(CliTest, LaunchRejectsBadFlags) {
  EXPECT_EQ(ntp("launch --nproc 0 -- true").code, 2);
  EXPECT_EQ(ntp("launch --nproc 2 --store tcp://x -- true").code, 2);
  EXPECT_EQ(ntp("launch --nproc 2").code, 2);
}

}  // namespace
