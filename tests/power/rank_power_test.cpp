// RankPower: one rank's GPU boosted while its replica is degraded and restored
// when it heals; power off plans k/n shares; nvml refuses a device that does
// not match the configured model.
#include "power/rank_power.h"

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cmath>

#include "power/simulated_controller.h"

namespace ntp::power {
namespace {

RankPowerOptions simulated_options() {
  RankPowerOptions options;
  options.mode = PowerMode::simulated;
  options.model = {1000.0, 1.3, 0.65};
  options.headroom_w = 1000.0;
  options.restore_on_signal = false;
  return options;
}

TEST(RankPower, BoostsWhileDegradedAndRestoresWhenHealed) {
  RankPower power(simulated_options());
  ASSERT_NE(power.controller(), nullptr);
  // This rank belongs to replica 1; it lost one of its 8 GPUs.
  const BoostPlan degraded = power.plan(8, {8, 7, 8}, 96);
  const PowerDecision d = power.apply(degraded, 8, 1);
  EXPECT_EQ(d.active, 7);
  EXPECT_EQ(d.need, 8.0 / 7.0);
  EXPECT_EQ(d.speedup, 8.0 / 7.0);
  EXPECT_NEAR(d.limit_w, 1228.06, 0.01);
  EXPECT_EQ(d.device_limit_w, d.limit_w);
  EXPECT_EQ(d.share, 32);
  EXPECT_EQ(power.controller()->get_limit_w(0), d.limit_w);
  // The replica heals: the GPU goes back to its original limit.
  const PowerDecision healed = power.apply(power.plan(8, {8, 8, 8}, 96), 8, 1);
  EXPECT_EQ(healed.speedup, 1.0);
  EXPECT_EQ(healed.device_limit_w, 1000.0);
  EXPECT_EQ(power.controller()->get_limit_w(0), 1000.0);
}

TEST(RankPower, BoostsToAGivenNeed) {
  // The trainer may know its degraded replica needs more than n/k (say, from
  // its step times): 1.2 at k = 7 of 8 needs 1000 * 1.2^(1/0.65) = 1323 W,
  // above the 9000 W / 7 = 1286 W the domain budget gives each.
  RankPower power(simulated_options());
  const BoostPlan plan = power.plan(8, {8, 7, 8}, 96, {0.0, 1.2, 0.0});
  const PowerDecision d = power.apply(plan, 8, 1);
  EXPECT_EQ(d.need, 1.2);
  EXPECT_NEAR(d.limit_w, 9000.0 / 7.0, 1e-9);
  EXPECT_EQ(plan.replicas[1].cap, BoostCap::domain_budget);
  EXPECT_LT(d.speedup, 1.2);
  EXPECT_EQ(power.controller()->get_limit_w(0), d.limit_w);
}

TEST(RankPower, PowerOffPlansKOverNAndSetsNothing) {
  RankPowerOptions options;  // mode off
  RankPower power(options);
  EXPECT_EQ(power.controller(), nullptr);
  const BoostPlan plan = power.plan(8, {8, 4, 0}, 30);
  EXPECT_EQ(plan.replicas[0].share, 20);
  EXPECT_EQ(plan.replicas[1].share, 10);
  EXPECT_EQ(plan.replicas[2].share, 0);
  EXPECT_EQ(plan.replicas[1].speedup, 1.0);
  EXPECT_EQ(plan.replicas[2].speedup, 0.0);
  const PowerDecision d = power.apply(plan, 8, 1);
  EXPECT_EQ(d.need, 2.0);
  EXPECT_EQ(d.limit_w, 0.0);
  EXPECT_EQ(d.device_limit_w, 0.0);
  EXPECT_THROW(power.apply(plan, 8, 3), std::invalid_argument);
}

TEST(RankPower, NvmlNotAvailableIsAPowerError) {
  RankPowerOptions options = simulated_options();
  options.mode = PowerMode::nvml;
  options.nvml.library = "libnvidia-ml-absent.so.1";
  try {
    RankPower power(options);
    FAIL() << "started without NVML";
  } catch (const PowerError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("NVML not available: ", 0), 0u) << e.what();
  }
}

// Against fake_nvml (default limit 700 W, maximum 900 W, set allowed via its
// control function).
TEST(RankPower, NvmlDeviceMustMatchTheConfiguredModel) {
  void* fixture = dlopen(FAKE_NVML_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(fixture, nullptr) << dlerror();
  reinterpret_cast<void (*)(int)>(dlsym(fixture, "fake_nvml_allow_set"))(1);
  RankPowerOptions options = simulated_options();
  options.mode = PowerMode::nvml;
  options.nvml = {FAKE_NVML_PATH, {"GPU-fake-1"}};
  try {
    RankPower power(options);  // the model says 1000 W
    ADD_FAILURE() << "accepted a 700 W GPU as 1000 W";
  } catch (const PowerError& e) {
    EXPECT_NE(std::string(e.what()).find("power.tdp_w = 1000.0 W but GPU 0 (GPU-fake-1) defaults "
                                         "to 700.0 W"),
              std::string::npos)
        << e.what();
  }
  options.model = {700.0, 1.3, 0.65};  // 910 W: above the GPU's 900 W
  EXPECT_THROW(RankPower{options}, PowerError);
  options.model = {700.0, 900.0 / 700.0, 0.65};
  {
    RankPower power(options);
    const PowerDecision d = power.apply(power.plan(4, {4, 3}, 8), 4, 1);
    EXPECT_NEAR(d.device_limit_w, 900.0, 1e-3);  // need 4/3 is beyond the device: capped
    EXPECT_LT(d.speedup, 4.0 / 3.0);
  }
  const auto limit_mw = reinterpret_cast<unsigned (*)(int)>(dlsym(fixture, "fake_nvml_limit_mw"));
  EXPECT_EQ(limit_mw(1), 700000u);  // restored when RankPower went away
  dlclose(fixture);
}

}  // namespace
}  // namespace ntp::power
