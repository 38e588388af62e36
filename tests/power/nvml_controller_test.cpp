// The NVML backend fails cleanly where NVML is missing: a PowerError that
// says "NVML not available", never a crash.
#include "power/nvml_controller.h"

#include <gtest/gtest.h>

#include <dlfcn.h>

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
  }
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
