// The trainer's side of power.mode: the RankPower a worker builds from its
// configuration, the plan it logs, and its restore paths (simulated backend,
// the same LimitGuard calls as NVML).
#include "train/power_setup.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>

#include <gtest/gtest.h>

namespace ntp::train {
namespace {

PowerConfig simulated_config() {
  PowerConfig config;
  config.mode = power::PowerMode::simulated;
  config.tdp_w = 700.0;
  config.max_frac = 1.4;
  config.headroom_w = 150.0;
  config.alpha = 0.7;
  return config;
}

TEST(PowerSetup, OptionsCarryTheConfiguredModelAndTheRanksGpu) {
  const power::RankPowerOptions options = rank_power_options(simulated_config(), "GPU-abc");
  EXPECT_EQ(options.mode, power::PowerMode::simulated);
  EXPECT_DOUBLE_EQ(options.model.tdp_w, 700.0);
  EXPECT_DOUBLE_EQ(options.model.max_frac, 1.4);
  EXPECT_DOUBLE_EQ(options.model.alpha, 0.7);
  EXPECT_DOUBLE_EQ(options.headroom_w, 150.0);
  EXPECT_EQ(options.nvml.devices, (std::vector<std::string>{"GPU-abc"}));
  EXPECT_TRUE(options.restore_on_signal);
  EXPECT_TRUE(rank_power_options(simulated_config(), "").nvml.devices.empty());
}

TEST(PowerSetup, PlanJsonIsThePolicysPlan) {
  const power::RankPower rank(rank_power_options(simulated_config(), ""));
  const power::BoostPlan plan = rank.plan(4, {3, 0, 4}, 12);
  const power::BoostPlan expected =
      power::plan_boost(4, {3, 0, 4}, 150.0, 12, power::DevicePowerModel{700.0, 1.4, 0.7});
  const nlohmann::json json = plan_json(plan, 4);
  ASSERT_EQ(json.size(), 3u);
  for (std::size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(json[r]["replica"], r);
    EXPECT_EQ(json[r]["active"], expected.replicas[r].active);
    EXPECT_DOUBLE_EQ(json[r]["limit_w"].get<double>(), expected.replicas[r].limit_w);
    EXPECT_DOUBLE_EQ(json[r]["speedup"].get<double>(), expected.replicas[r].speedup);
    EXPECT_EQ(json[r]["share"], expected.replicas[r].share);
  }
  EXPECT_DOUBLE_EQ(json[0]["need"].get<double>(), 4.0 / 3.0);
  EXPECT_DOUBLE_EQ(json[1]["need"].get<double>(), 0.0);  // sits out
  const std::vector<ReplicaPower> metrics = replica_power(plan);
  EXPECT_DOUBLE_EQ(metrics[0].limit_w, expected.replicas[0].limit_w);
  EXPECT_DOUBLE_EQ(metrics[2].speedup, 1.0);
}

std::atomic<int> g_chained{0};
extern "C" void on_chained_signal(int signo) { g_chained.store(signo); }

// SIGTERM to a worker whose GPU is boosted: the limit goes back to the default
// before the signal takes its course (here a handler installed earlier, which
// lets the test process survive to look).
TEST(PowerSetup, SigtermRestoresTheBoostedLimitThenChains) {
  struct sigaction test_handler {};
  test_handler.sa_handler = on_chained_signal;
  sigemptyset(&test_handler.sa_mask);
  struct sigaction original {};
  ASSERT_EQ(::sigaction(SIGTERM, &test_handler, &original), 0);
  g_chained.store(0);
  {
    power::RankPower rank(rank_power_options(simulated_config(), ""));
    const power::BoostPlan plan = rank.plan(4, {3, 4}, 8);
    const power::PowerDecision decision = rank.apply(plan, 4, 0);
    ASSERT_GT(decision.device_limit_w, 700.0);
    ASSERT_EQ(std::raise(SIGTERM), 0);
    for (int i = 0; i < 500 && g_chained.load() == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(g_chained.load(), SIGTERM) << "the signal did not reach the earlier handler";
    EXPECT_DOUBLE_EQ(rank.controller()->get_limit_w(0), 700.0);
  }
  ::sigaction(SIGTERM, &original, nullptr);
}

}  // namespace
}  // namespace ntp::train
