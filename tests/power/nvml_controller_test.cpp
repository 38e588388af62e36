// The NVML backend fails cleanly where NVML is missing: a PowerError that
// says "NVML not available", never a crash.
#include "power/nvml_controller.h"

#include <gtest/gtest.h>

#include <dlfcn.h>

#include "power/limit_guard.h"
#include "power/power_mode.h"

namespace ntp::power {
namespace {

std::string construction_error(NvmlOptions options) {
  try {
    NvmlPowerController nvml(std::move(options));
    return "";
  } catch (const PowerError& e) {
    return e.what();
  }
}

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.rfind(prefix, 0) == 0;
}

TEST(NvmlController, MissingLibraryIsNotAvailable) {
  const std::string error = construction_error({"libnvidia-ml-absent.so.1", {}});
  EXPECT_TRUE(starts_with(error, "NVML not available: ")) << error;
  EXPECT_NE(error.find("libnvidia-ml-absent.so.1"), std::string::npos) << error;
}

TEST(NvmlController, LibraryWithoutNvmlIsNotAvailable) {
  const std::string error = construction_error({"libm.so.6", {}});
  EXPECT_EQ(error, "NVML not available: libm.so.6 lacks nvmlInit_v2");
}

// The default library: on a host without a GPU driver (as here) it reports
// not-available; on a GPU host it opens and reads every device's limits.
TEST(NvmlController, DefaultLibraryOpensOrReportsNotAvailable) {
  void* probe = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (probe == nullptr) {
    const std::string error = construction_error({});
    EXPECT_TRUE(starts_with(error, "NVML not available: ")) << error;
    return;
  }
  dlclose(probe);
  NvmlPowerController nvml;
  for (int device = 0; device < nvml.device_count(); ++device) {
    const LimitRange range = nvml.limit_range(device);
    EXPECT_GT(range.max_w, 0.0);
    EXPECT_LE(range.min_w, nvml.get_limit_w(device));
    EXPECT_LE(nvml.get_limit_w(device), range.max_w);
    EXPECT_GT(nvml.default_limit_w(device), 0.0);
    EXPECT_GE(nvml.power_usage_w(device), 0.0);
    EXPECT_FALSE(nvml.product_name(device).empty());
    const Clocks clocks = nvml.clocks(device);
    if (clocks.sm_mhz) {
      EXPECT_GT(*clocks.sm_mhz, 0u);
    }
    if (clocks.mem_mhz) {
      EXPECT_GT(*clocks.mem_mhz, 0u);
    }
  }
}

// The NVML backend against fake_nvml.cpp, a library with NVML's C ABI: the
// real dlopen/dlsym path, device selection, errors and milliwatt rounding.
class NvmlFixtureTest : public testing::Test {
 protected:
  void SetUp() override {
    fixture_ = dlopen(FAKE_NVML_PATH, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(fixture_, nullptr) << dlerror();
    allow_set_ = reinterpret_cast<void (*)(int)>(dlsym(fixture_, "fake_nvml_allow_set"));
    limit_mw_ = reinterpret_cast<unsigned (*)(int)>(dlsym(fixture_, "fake_nvml_limit_mw"));
    allow_set_(0);
  }
  void TearDown() override { dlclose(fixture_); }

  void* fixture_ = nullptr;
  void (*allow_set_)(int) = nullptr;
  unsigned (*limit_mw_)(int) = nullptr;
};

TEST_F(NvmlFixtureTest, ReadsDevicesInWatts) {
  NvmlPowerController nvml({FAKE_NVML_PATH, {}});
  ASSERT_EQ(nvml.device_count(), 2);
  EXPECT_EQ(nvml.device_name(1), "GPU 1 (GPU-fake-1)");
  EXPECT_EQ(nvml.limit_range(0).min_w, 200.0);
  EXPECT_EQ(nvml.limit_range(0).max_w, 900.0);
  EXPECT_EQ(nvml.default_limit_w(0), 700.0);
  EXPECT_EQ(nvml.get_limit_w(0), 700.0);
  EXPECT_EQ(nvml.power_usage_w(0), 123.456);
  EXPECT_THROW(nvml.get_limit_w(2), PowerError);
  EXPECT_EQ(nvml.product_name(1), "NVIDIA Fake H200");
  EXPECT_EQ(nvml.clocks(0).sm_mhz, 1980u);
  EXPECT_EQ(nvml.clocks(0).mem_mhz, 3201u);
  // A device without the clock query: no value, no error (ntp power show prints "-").
  EXPECT_FALSE(nvml.clocks(1).sm_mhz.has_value());
  EXPECT_FALSE(nvml.clocks(1).mem_mhz.has_value());
  EXPECT_THROW(nvml.clocks(2), PowerError);
  const DevicePowerModel model = device_model(nvml, 0, 1.3, 0.65);
  EXPECT_EQ(model.tdp_w, 700.0);
  EXPECT_NEAR(model.max_frac, 900.0 / 700.0, 1e-12);  // the device allows less than 1.3
}

TEST_F(NvmlFixtureTest, SelectsDevicesByUuidOrIndex) {
  NvmlPowerController by_uuid({FAKE_NVML_PATH, {"GPU-fake-1"}});
  ASSERT_EQ(by_uuid.device_count(), 1);
  EXPECT_EQ(by_uuid.device_name(0), "GPU 0 (GPU-fake-1)");
  NvmlPowerController by_index({FAKE_NVML_PATH, {"1", "0"}});
  EXPECT_EQ(by_index.device_name(0), "GPU 0 (GPU-fake-1)");
  try {
    NvmlPowerController missing({FAKE_NVML_PATH, {"GPU-nope"}});
    FAIL() << "opened a device that does not exist";
  } catch (const PowerError& e) {
    EXPECT_NE(std::string(e.what()).find("no device 'GPU-nope'"), std::string::npos) << e.what();
  }
}

TEST_F(NvmlFixtureTest, MissingPermissionIsAClearError) {
  NvmlPowerController nvml({FAKE_NVML_PATH, {}});
  try {
    nvml.set_limit_w(0, 800.0);
    FAIL() << "set a limit without permission";
  } catch (const PowerError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no permission to set the power limit of GPU 0 (GPU-fake-0)"),
              std::string::npos) << what;
    EXPECT_NE(what.find("needs root"), std::string::npos) << what;
  }
  EXPECT_EQ(limit_mw_(0), 700000u);
  EXPECT_THROW(nvml.set_limit_w(0, 950.0), PowerError);  // above the device maximum
}

TEST_F(NvmlFixtureTest, SetsMilliwattsRoundingDownAndGuardRestoresExactly) {
  allow_set_(1);
  NvmlPowerController nvml({FAKE_NVML_PATH, {}});
  {
    LimitGuard guard(nvml);
    guard.apply(1, 812.3456789);
    EXPECT_EQ(limit_mw_(1), 812345u);  // never above what the plan allows
    EXPECT_EQ(nvml.get_limit_w(1), 812.345);
    guard.apply(0, 700.0);  // not above the default: nothing to set
    EXPECT_EQ(limit_mw_(0), 700000u);
  }
  EXPECT_EQ(limit_mw_(1), 700000u);
}

TEST(PowerMode, ParsesTheThreeModesAndNamesTheKeyOnError) {
  EXPECT_EQ(parse_power_mode("off"), PowerMode::off);
  EXPECT_EQ(parse_power_mode("simulated"), PowerMode::simulated);
  EXPECT_EQ(parse_power_mode("nvml"), PowerMode::nvml);
  EXPECT_EQ(to_string(PowerMode::simulated), "simulated");
  try {
    parse_power_mode("turbo");
    FAIL() << "accepted 'turbo'";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("power.mode"), std::string::npos);
  }
}

TEST(PowerMode, FactoryBuildsTheBackends) {
  ControllerOptions options;
  options.simulated_devices = 4;
  EXPECT_EQ(make_power_controller(PowerMode::off, options), nullptr);
  const auto sim = make_power_controller(PowerMode::simulated, options);
  ASSERT_NE(sim, nullptr);
  EXPECT_EQ(sim->backend(), "simulated");
  EXPECT_EQ(sim->device_count(), 4);
  options.nvml.library = "libnvidia-ml-absent.so.1";
  EXPECT_THROW(make_power_controller(PowerMode::nvml, options), PowerError);
}

}  // namespace
}  // namespace ntp::power
