// `ntp train` and `ntp launch` as a new user meets them: run folders, path
// arguments, data formats, flags and settings that must be used or rejected.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_run.h"

namespace {

namespace fs = std::filesystem;

// A small in-process run: TP = DP = 1, one layer.
const std::string kSmall = "--set model.layers=1 --set train.global_batch=2 --set train.micro_batch=2 ";

class TrainCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ntp_train_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  ntp::testing::CliRun ntp(const std::string& args) const { return ntp::testing::run_cli(NTP_BINARY, args); }

  // A shell command in dir_; returns its exit status.
  int shell(const std::string& command) const {
    const int status = std::system(("cd " + dir_.string() + " && " + command).c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  fs::path dir_;
};

std::vector<nlohmann::json> read_lines(const fs::path& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

std::string text_of(const ntp::testing::CliRun& run) { return run.out + run.err; }

TEST_F(TrainCliTest, RunsStartedTogetherGetAFolderEach) {
  const std::string train = std::string(NTP_BINARY) + " train " + kSmall + "--set train.steps=2 > /dev/null 2>&1";
  // Three runs at once and one right after: every one exits 0 into its own folder.
  ASSERT_EQ(shell("(" + train + " & " + train + " & " + train + " & wait) && " + train +
                  " && test $(ls runs | wc -l) -eq 4"),
            0);
  for (const auto& entry : fs::directory_iterator(dir_ / "runs")) {
    const auto metrics = read_lines(entry.path() / "metrics.jsonl");
    ASSERT_EQ(metrics.size(), 2u) << entry.path();
    EXPECT_EQ(metrics[0]["step"], 0);
    EXPECT_EQ(metrics[1]["step"], 1);
    std::size_t started = 0;
    for (const auto& e : read_lines(entry.path() / "events.jsonl")) started += e["event"] == "run_started";
    EXPECT_EQ(started, 1u) << entry.path();
  }
}

TEST_F(TrainCliTest, PathArgumentsAreCheckedForTheirKind) {
  const fs::path folder = dir_ / "folder";
  const fs::path file = dir_ / "file.toml";
  fs::create_directories(folder);
  std::ofstream(file) << "[train]\nsteps = 1\n";
  const std::vector<std::string> bad = {
      "train --config " + folder.string(),
      "train --run-dir " + file.string() + " --set train.steps=1",
      "sim run " + folder.string(),
      "sim model " + folder.string(),
      "verify " + file.string(),
      "launch --nproc 1 --run-dir " + file.string() + " -- true",
  };
  for (const std::string& args : bad) {
    const auto run = ntp(args);
    EXPECT_EQ(run.exit_code, 2) << args << "\n" << text_of(run);
    const bool named = text_of(run).find(folder.string()) != std::string::npos ||
                       text_of(run).find(file.string()) != std::string::npos;
    EXPECT_TRUE(named) << args << "\n" << text_of(run);
  }
  EXPECT_FALSE(fs::exists(dir_ / "runs"));
}

TEST_F(TrainCliTest, AnExplicitRunFolderHoldsOneRun) {
  const std::string run_dir = (dir_ / "run").string();
  ASSERT_EQ(ntp("train " + kSmall + "--set train.steps=1 --run-dir " + run_dir).exit_code, 0);
  const auto again = ntp("train " + kSmall + "--set train.steps=1 --run-dir " + run_dir);
  EXPECT_EQ(again.exit_code, 2) << text_of(again);
  EXPECT_NE(text_of(again).find("already holds a run"), std::string::npos) << text_of(again);
}

}  // namespace
