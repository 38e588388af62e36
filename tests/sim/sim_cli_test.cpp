// `ntp sim` through the built binary: flags checked by name, JSON output, and
// the scenario written by --out running again to the same summary.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli_run.h"
#include "test_scenarios.h"

namespace {

using ntp::testing::CliRun;

std::string temp_prefix() { return "sim_cli_" + std::to_string(getpid()) + "_"; }

std::string temp_path(const std::string& name) { return ::testing::TempDir() + temp_prefix() + name; }

// Removes this process's temporary files when its tests are done.
class TempFiles : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(::testing::TempDir(), ec)) {
      if (entry.path().filename().string().rfind(temp_prefix(), 0) == 0) std::filesystem::remove_all(entry.path(), ec);
    }
  }
};
const auto* const kTempFiles = ::testing::AddGlobalTestEnvironment(new TempFiles);

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

CliRun run_ntp(const std::string& args) { return ntp::testing::run_cli(NTP_BINARY, args); }

// A 256-GPU scenario that runs in milliseconds.
std::string small_scenario_file() {
  const std::string path = temp_path("small.toml");
  std::ofstream(path) << ntp::sim::testing::small_scenario_toml();
  return path;
}

TEST(SimCli, ZeroSeedsOrThreadsAreRejectedNamingTheFlag) {
  const std::string scenario = small_scenario_file();
  for (const char* flag : {"--seeds", "--threads"}) {
    const CliRun run = run_ntp("sim run " + scenario + " " + flag + " 0");
    EXPECT_EQ(run.exit_code, 2) << flag;
    EXPECT_NE(run.err.find(flag), std::string::npos) << run.err;
    EXPECT_TRUE(run.out.empty()) << run.out;
  }
}

TEST(SimCli, JsonSummaryHasEveryPolicy) {
  const CliRun run = run_ntp("sim run " + small_scenario_file() + " --seeds 2 --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json doc = nlohmann::json::parse(run.out);
  const nlohmann::json& policies = doc.at("points").at(0).at("timeline").at("policies");
  for (const char* p : {"dp-drop", "spares", "ckpt-restart", "ntp", "ntp-pw"}) {
    const double g = policies.at(p).at("goodput").get<double>();
    EXPECT_GT(g, 0.0) << p;
    EXPECT_LE(g, 1.0) << p;
  }
  EXPECT_EQ(doc.at("points").at(0).at("timeline").at("seeds").get<int>(), 2);
}

TEST(SimCli, ScenarioWrittenByOutRunsAgainToTheSameSummary) {
  const std::string dir = temp_path("out");
  const CliRun first = run_ntp("sim run " + small_scenario_file() +
                               " --sweep failures.distribution=weibull,exponential --json --out " +
                               dir);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const CliRun again = run_ntp("sim run " + dir + "/scenario.toml --json");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(nlohmann::json::parse(again.out)["points"], nlohmann::json::parse(first.out)["points"]);
  EXPECT_EQ(nlohmann::json::parse(read_file(dir + "/summary.json"))["points"],
            nlohmann::json::parse(first.out)["points"]);
}

TEST(SimCli, OutIntoANonEmptyFolderNeedsForce) {
  const std::string dir = temp_path("nonempty");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/notes.txt") << "mine\n";
  const std::string run = "sim run " + small_scenario_file() + " --seeds 1 --out " + dir;
  const CliRun refused = run_ntp(run);
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_NE(refused.err.find("--out"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("--force"), std::string::npos) << refused.err;
  EXPECT_TRUE(refused.out.empty()) << refused.out;  // refused before the simulation ran
  EXPECT_FALSE(std::filesystem::exists(dir + "/summary.json"));
  const CliRun forced = run_ntp(run + " --force");
  EXPECT_EQ(forced.exit_code, 0) << forced.err;
  EXPECT_TRUE(std::filesystem::exists(dir + "/summary.json"));
  EXPECT_EQ(read_file(dir + "/notes.txt"), "mine\n");
}

TEST(SimCli, UnwritableOutFailsBeforeTheSimulation) {
  const std::string file = temp_path("a_file");
  std::ofstream(file) << "x\n";
  // A path under a regular file can be neither created nor written.
  const CliRun run = run_ntp("sim run " + small_scenario_file() + " --seeds 1 --out " + file + "/sub");
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_NE(run.err.find("--out"), std::string::npos) << run.err;
  EXPECT_TRUE(run.out.empty()) << run.out;
}

TEST(SimCli, SavedScenarioIsResolvedWithEveryKey) {
  const std::string dir = temp_path("resolved");
  const CliRun run = run_ntp("sim run " + small_scenario_file() + " --seeds 1 --out " + dir);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string saved = read_file(dir + "/scenario.toml");
  // Keys the small scenario leaves at their defaults are written with their values.
  for (const char* key : {"nvlink_gbps", "rate_multiplier", "weibull_shape", "swap_hours",
                          "headroom_w", "reconfig_s", "interval_hours", "bucket_hours",
                          "placements", "dp_overlap", "act_bytes", "state_bytes", "protocol_s", "rejoin_s"}) {
    EXPECT_NE(saved.find(key), std::string::npos) << key << "\n" << saved;
  }
}

TEST(SimCli, SameSeedSameSummaryWhateverTheThreadCount) {
  // The whole summary (every policy, series mean, snapshot points), not one figure.
  const std::string scenario = small_scenario_file();
  for (const char* mode : {"timeline", "snapshot"}) {
    const std::string args = "sim run " + scenario + " --mode " + mode + " --seeds 5 --json";
    const CliRun one = run_ntp(args + " --threads 1");
    const CliRun three = run_ntp(args + " --threads 3");
    ASSERT_EQ(one.exit_code, 0) << one.err;
    ASSERT_EQ(three.exit_code, 0) << three.err;
    EXPECT_EQ(one.out, three.out) << mode;
    const CliRun other_seed = run_ntp(args + " --threads 1 --set run.seed=7");
    EXPECT_NE(one.out, other_seed.out) << mode;
  }
}

TEST(SimCli, BadScenarioKeyIsNamedWithExitTwo) {
  const CliRun run =
      run_ntp("sim run " + small_scenario_file() + " --set cluster.gpuz=3 --seeds 1");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("cluster.gpuz: unknown key"), std::string::npos) << run.err;
}

}  // namespace
