// The simulated backend and the restore path every backend shares: LimitGuard
// puts original limits back after a heal, after an error, and at scope exit.
#include "power/limit_guard.h"

#include <gtest/gtest.h>

#include <cmath>

#include "power/boost_policy.h"
#include "power/simulated_controller.h"

namespace ntp::power {
namespace {

const DevicePowerModel kModel{1000.0, 1.3, 0.65};

TEST(SimulatedController, FollowsTheDeviceModelAndRecordsLimits) {
  SimulatedPowerController sim(2, kModel);
  EXPECT_EQ(sim.device_count(), 2);
  EXPECT_EQ(sim.default_limit_w(1), 1000.0);
  EXPECT_EQ(sim.get_limit_w(1), 1000.0);
  EXPECT_EQ(sim.speed(1), 1.0);
  sim.set_limit_w(1, 1200.0);
  EXPECT_NEAR(sim.speed(1), std::pow(1.2, 0.65), 1e-12);
  EXPECT_EQ(sim.power_usage_w(1), 1200.0);
  EXPECT_EQ(sim.limit_history(1), (std::vector<double>{1200.0}));
  EXPECT_TRUE(sim.limit_history(0).empty());
  // No model name or clocks to show (ntp power show prints "-"); a bad index is still an error.
  EXPECT_EQ(sim.product_name(0), "");
  EXPECT_FALSE(sim.clocks(0).sm_mhz.has_value());
  EXPECT_FALSE(sim.clocks(0).mem_mhz.has_value());
  EXPECT_THROW(sim.clocks(2), PowerError);
}

TEST(SimulatedController, RejectsLimitsOutsideTheDeviceRange) {
  SimulatedPowerController sim(1, kModel);
  EXPECT_THROW(sim.set_limit_w(0, 1300.5), PowerError);
  EXPECT_THROW(sim.set_limit_w(0, 400.0), PowerError);
  EXPECT_THROW(sim.set_limit_w(1, 1000.0), PowerError);
  EXPECT_EQ(sim.get_limit_w(0), 1000.0);
}

TEST(DeviceModel, UsesTheDefaultLimitAsTdpAndCapsMaxFrac) {
  SimulatedPowerController sim(1, {700.0, 1.2, 0.65});
  const DevicePowerModel m = device_model(sim, 0, 1.5, 0.7);
  EXPECT_EQ(m.tdp_w, 700.0);
  EXPECT_NEAR(m.max_frac, 1.2, 1e-12);  // the device stops at 840 W
  EXPECT_EQ(m.alpha, 0.7);
}

TEST(LimitGuard, RestoresOriginalLimitsWhenDestroyed) {
  SimulatedPowerController sim(3, kModel);
  sim.set_limit_w(2, 900.0);  // an operator's own setting, not the default
  {
    LimitGuard guard(sim);
    guard.set_limit_w(0, 1250.0);
    guard.set_limit_w(2, 1100.0);
    guard.set_limit_w(2, 1150.0);
    EXPECT_EQ(guard.changed_devices(), (std::vector<int>{0, 2}));
  }
  EXPECT_EQ(sim.get_limit_w(0), 1000.0);
  EXPECT_EQ(sim.get_limit_w(1), 1000.0);
  EXPECT_EQ(sim.get_limit_w(2), 900.0);
}

TEST(LimitGuard, ApplyBoostsDegradedDomainsAndRestoresHealedOnes) {
  SimulatedPowerController sim(1, kModel);
  LimitGuard guard(sim);
  // TP 8 with 7 active: the plan's limit for this GPU.
  const BoostPlan degraded = plan_boost(8, {7}, 1000.0, 8, kModel);
  guard.apply(0, degraded.replicas[0].limit_w);
  EXPECT_NEAR(sim.get_limit_w(0), 1228.06, 0.01);
  EXPECT_NEAR(sim.speed(0), 8.0 / 7.0, 1e-9);
  // The replica heals: the plan asks for TDP and the guard restores.
  const BoostPlan healed = plan_boost(8, {8}, 1000.0, 8, kModel);
  guard.apply(0, healed.replicas[0].limit_w);
  EXPECT_EQ(sim.get_limit_w(0), 1000.0);
  EXPECT_TRUE(guard.changed_devices().empty());
}

// An error half-way through applying a plan: the exception leaves the scope,
// and the guard restores every device it touched, including the one whose
// set failed.
TEST(LimitGuard, RestoresLimitsAfterAnInjectedError) {
  SimulatedPowerController sim(4, kModel);
  const BoostPlan plan = plan_boost(8, {6}, 2000.0, 8, kModel);
  const double boosted = plan.replicas[0].limit_w;
  ASSERT_GT(boosted, 1000.0);
  sim.inject_set_failure(2);
  bool failed = false;
  try {
    LimitGuard guard(sim);
    for (int device = 0; device < sim.device_count(); ++device) guard.apply(device, boosted);
  } catch (const PowerError& e) {
    failed = true;
    EXPECT_NE(std::string(e.what()).find("injected failure"), std::string::npos);
  }
  ASSERT_TRUE(failed);
  for (int device = 0; device < sim.device_count(); ++device) {
    EXPECT_EQ(sim.get_limit_w(device), 1000.0) << "device " << device;
  }
  EXPECT_EQ(sim.limit_history(0), (std::vector<double>{boosted, 1000.0}));
  EXPECT_EQ(sim.limit_history(1), (std::vector<double>{boosted, 1000.0}));
  EXPECT_EQ(sim.limit_history(2), (std::vector<double>{1000.0}));  // its boost failed
  EXPECT_TRUE(sim.limit_history(3).empty());                       // never reached
}

// A restore that fails on one device still restores the others, reports the
// failure, and can be retried.
TEST(LimitGuard, RestoreAllTriesEveryDeviceThenReports) {
  SimulatedPowerController sim(3, kModel);
  LimitGuard guard(sim);
  for (int device = 0; device < 3; ++device) guard.set_limit_w(device, 1200.0);
  sim.inject_set_failure(0);  // the first restore fails
  EXPECT_THROW(guard.restore_all(), PowerError);
  EXPECT_EQ(sim.get_limit_w(0), 1200.0);
  EXPECT_EQ(sim.get_limit_w(1), 1000.0);
  EXPECT_EQ(sim.get_limit_w(2), 1000.0);
  EXPECT_EQ(guard.changed_devices(), (std::vector<int>{0}));
  guard.restore_all();
  EXPECT_EQ(sim.get_limit_w(0), 1000.0);
}

}  // namespace
}  // namespace ntp::power
