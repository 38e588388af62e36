// `ntp power plan` through the built binary: JSON and table output, exit codes,
// and bad input naming the flag with nothing on stdout.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "cli_run.h"
#include "power/boost_policy.h"

namespace {

using ntp::testing::CliRun;

CliRun run_ntp(const std::string& args) { return ntp::testing::run_cli(NTP_BINARY, args); }

const char* kPlan =
    "power plan --tp 8 --active \"8,7,4\" --tdp 1000 --max-frac 1.3 --headroom-w 1000 "
    "--alpha 0.65 --global-batch 300";

TEST(PowerCli, PlanJsonMatchesThePolicy) {
  const CliRun run = run_ntp(std::string(kPlan) + " --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json doc = nlohmann::json::parse(run.out);
  ASSERT_EQ(doc.size(), 1u);
  const auto& replicas = doc.at("replicas");
  const ntp::power::BoostPlan plan =
      ntp::power::plan_boost(8, {8, 7, 4}, 1000.0, 300, {1000.0, 1.3, 0.65});
  ASSERT_EQ(replicas.size(), 3u);
  long total = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(replicas[i].size(), 6u);
    EXPECT_EQ(replicas[i].at("need").get<double>(), plan.replicas[i].need);
    EXPECT_EQ(replicas[i].at("cap").get<std::string>(), ntp::power::to_string(plan.replicas[i].cap));
    EXPECT_EQ(replicas[i].at("active").get<int>(), plan.replicas[i].active);
    EXPECT_EQ(replicas[i].at("limit_w").get<double>(), plan.replicas[i].limit_w);
    EXPECT_EQ(replicas[i].at("speedup").get<double>(), plan.replicas[i].speedup);
    EXPECT_EQ(replicas[i].at("share").get<long>(), plan.replicas[i].share);
    total += replicas[i].at("share").get<long>();
  }
  EXPECT_EQ(total, 300);
  EXPECT_EQ(replicas[0].at("limit_w").get<double>(), 1000.0);
  EXPECT_EQ(replicas[2].at("limit_w").get<double>(), 1300.0);
}

TEST(PowerCli, PlanTableIsReadable) {
  const CliRun run = run_ntp(kPlan);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("domain budget 8 x 1000.0 W + 1000.0 W headroom = 9000.0 W"),
            std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("replica"), std::string::npos);
  EXPECT_NE(run.out.find("7/8"), std::string::npos);
  EXPECT_NE(run.out.find("1300.0"), std::string::npos);
}

void expect_bad_input(const std::string& args, const std::string& flag) {
  const CliRun run = run_ntp(args);
  EXPECT_EQ(run.exit_code, 2) << args << "\n" << run.err;
  EXPECT_TRUE(run.out.empty()) << args << "\nstdout: " << run.out;
  EXPECT_NE(run.err.find(flag), std::string::npos) << args << "\nstderr: " << run.err;
}

TEST(PowerCli, PlanBoostsToAGivenNeedAndSaysWhatBinds) {
  // A TP-30 group of 32 that needs 1.14x: met with 9.6 kW headroom, short without.
  const std::string base = "power plan --tp 32 --active \"32,30\" --need \"0,1.14\" --global-batch 64";
  const CliRun met = run_ntp(base + " --headroom-w 9600 --json");
  ASSERT_EQ(met.exit_code, 0) << met.err;
  const auto r = nlohmann::json::parse(met.out).at("replicas").at(1);
  EXPECT_EQ(r.at("speedup").get<double>(), 1.14);
  EXPECT_EQ(r.at("cap").get<std::string>(), "none");
  const CliRun short_of = run_ntp(base + " --headroom-w 0");
  ASSERT_EQ(short_of.exit_code, 0) << short_of.err;
  EXPECT_NE(short_of.out.find("domain_budget"), std::string::npos) << short_of.out;
  expect_bad_input(base.substr(0, base.find("--need")) + "--need 1.1 --global-batch 64", "--need");
}


TEST(PowerCli, BadInputNamesTheFlagAndPrintsNothing) {
  const std::string base = "power plan --global-batch 64 ";
  expect_bad_input(base + "--tp 8 --active \"8,9\"", "--active");
  expect_bad_input(base + "--tp 8 --active \"8,x\"", "--active");
  expect_bad_input(base + "--tp 8 --active \"8,,8\"", "--active");
  expect_bad_input(base + "--tp 8 --active \"8,-1\"", "--active");
  expect_bad_input(base + "--tp 0 --active \"0\"", "--tp");
  expect_bad_input(base + "--tp abc --active \"8\"", "--tp");
  expect_bad_input(base + "--tp 8 --active 8 --tdp 0", "--tdp");
  expect_bad_input(base + "--tp 8 --active 8 --tdp nan", "--tdp");
  expect_bad_input(base + "--tp 8 --active 8 --max-frac 0.9", "--max-frac");
  expect_bad_input(base + "--tp 8 --active 8 --alpha -1", "--alpha");
  expect_bad_input(base + "--tp 8 --active 8 --headroom-w -5", "--headroom-w");
  expect_bad_input(base + "--tp 8 --active 8 --headroom-w inf", "--headroom-w");
  expect_bad_input("power plan --tp 8 --active 8 --global-batch 0", "--global-batch");
  expect_bad_input("power plan --tp 8 --active 8", "--global-batch");
  expect_bad_input("power plan --tp 8 --active 8 --global-batch 99999999999999999",
                   "--global-batch");
  expect_bad_input("power plan --tp 8 --active 8 --global-batch 8 --bogus 1", "--bogus");
}

TEST(PowerCli, EveryReplicaSittingOutIsImpossible) {
  const CliRun run = run_ntp("power plan --tp 8 --active \"0,0\" --global-batch 64 --json");
  EXPECT_EQ(run.exit_code, 3);
  EXPECT_TRUE(run.out.empty());
  EXPECT_NE(run.err.find("sits out"), std::string::npos) << run.err;
}

TEST(PowerCli, ShowReportsMissingNvmlCleanlyOrListsDevices) {
  const CliRun run = run_ntp("power show");
  if (run.exit_code == 0) {
    EXPECT_NE(run.out.find("default_w"), std::string::npos);
  } else {
    EXPECT_EQ(run.exit_code, 1);
    EXPECT_NE(run.err.find("NVML not available"), std::string::npos) << run.err;
  }
  const CliRun simulated = run_ntp("power show --backend simulated --simulated-devices 2");
  EXPECT_EQ(simulated.exit_code, 0) << simulated.err;
  EXPECT_NE(simulated.out.find("simulated device 1"), std::string::npos) << simulated.out;
}

TEST(PowerCli, ShowAndResetThroughTheNvmlBackend) {
  // fake_nvml: two GPUs at their 700 W default; setting limits is refused, as
  // NVML refuses it to a user without root.
  const std::string nvml = std::string("--nvml-library ") + FAKE_NVML_PATH;
  const CliRun show = run_ntp("power show " + nvml + " --devices GPU-fake-1");
  ASSERT_EQ(show.exit_code, 0) << show.err;
  EXPECT_NE(show.out.find("GPU 0 (GPU-fake-1)"), std::string::npos) << show.out;
  EXPECT_EQ(show.out.find("GPU-fake-0"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("700.0"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("NVIDIA Fake H200"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("sm_mhz"), std::string::npos) << show.out;
  // fake device 0 reports its clocks (SM 1980 MHz, memory 3201 MHz); device 1 does not.
  const CliRun clocks = run_ntp("power show " + nvml + " --devices 0");
  ASSERT_EQ(clocks.exit_code, 0) << clocks.err;
  EXPECT_NE(clocks.out.find(" 1980 "), std::string::npos) << clocks.out;
  EXPECT_NE(clocks.out.find(" 3201\n"), std::string::npos) << clocks.out;
  EXPECT_NE(show.out.find("-       -\n"), std::string::npos) << show.out;
  const CliRun reset = run_ntp("power reset " + nvml);
  EXPECT_EQ(reset.exit_code, 1);
  EXPECT_NE(reset.err.find("no permission to set the power limit of GPU 0"), std::string::npos)
      << reset.err;
  const CliRun missing = run_ntp("power show --nvml-library libnvidia-ml-absent.so.1");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_TRUE(missing.out.empty());
  EXPECT_NE(missing.err.find("NVML not available"), std::string::npos) << missing.err;
}

TEST(PowerCli, ResetSimulatedAndRejectUnknownBackend) {
  const CliRun reset = run_ntp("power reset --backend simulated --simulated-devices 2");
  ASSERT_EQ(reset.exit_code, 0) << reset.err;
  EXPECT_NE(reset.out.find("simulated device 1: limit 1000.0 W (default)"), std::string::npos)
      << reset.out;
  expect_bad_input("power show --backend turbo", "--backend");
  expect_bad_input("power show --backend off", "--backend");
  expect_bad_input("power show --backend simulated --simulated-devices -1", "--simulated-devices");
}

}  // namespace
