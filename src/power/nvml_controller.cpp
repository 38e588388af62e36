// The NVML power backend (see nvml_controller.h).
#include "power/nvml_controller.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace ntp::power {
namespace {

// The subset of the NVML C API used here (no NVML header ships with ntp).
using NvmlReturn = int;  // nvmlReturn_t
using NvmlDevice = struct NvmlDeviceOpaque*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr NvmlReturn kNvmlNoPermission = 4;
constexpr NvmlReturn kNvmlNotSupported = 3;
// nvmlClockType_t values.
constexpr int kNvmlClockSm = 1;
constexpr int kNvmlClockMem = 2;

struct NvmlFunctions {
  NvmlReturn (*init)() = nullptr;                                     // nvmlInit_v2
  NvmlReturn (*shutdown)() = nullptr;                                 // nvmlShutdown
  const char* (*error_string)(NvmlReturn) = nullptr;                  // nvmlErrorString
  NvmlReturn (*count)(unsigned*) = nullptr;                           // nvmlDeviceGetCount_v2
  NvmlReturn (*by_index)(unsigned, NvmlDevice*) = nullptr;            // ..GetHandleByIndex_v2
  NvmlReturn (*by_uuid)(const char*, NvmlDevice*) = nullptr;          // ..GetHandleByUUID
  NvmlReturn (*uuid)(NvmlDevice, char*, unsigned) = nullptr;          // nvmlDeviceGetUUID
  NvmlReturn (*constraints)(NvmlDevice, unsigned*, unsigned*) = nullptr;  // ..LimitConstraints
  NvmlReturn (*default_limit)(NvmlDevice, unsigned*) = nullptr;  // ..PowerManagementDefaultLimit
  NvmlReturn (*limit)(NvmlDevice, unsigned*) = nullptr;          // ..PowerManagementLimit
  NvmlReturn (*set_limit)(NvmlDevice, unsigned) = nullptr;       // ..SetPowerManagementLimit
  NvmlReturn (*usage)(NvmlDevice, unsigned*) = nullptr;          // nvmlDeviceGetPowerUsage
  // Read by `ntp power show` alone; null where the library lacks them.
  NvmlReturn (*name)(NvmlDevice, char*, unsigned) = nullptr;     // nvmlDeviceGetName
  NvmlReturn (*clock)(NvmlDevice, int, unsigned*) = nullptr;     // nvmlDeviceGetClockInfo
};

template <typename Fn>
void bind(void* handle, const std::string& library, const char* symbol, Fn& fn) {
  fn = reinterpret_cast<Fn>(::dlsym(handle, symbol));
  if (fn == nullptr) {
    throw PowerError(fmt::format("NVML not available: {} lacks {}", library, symbol));
  }
}

void bind_all(void* h, const std::string& lib, NvmlFunctions& f) {
  bind(h, lib, "nvmlInit_v2", f.init);
  bind(h, lib, "nvmlShutdown", f.shutdown);
  bind(h, lib, "nvmlErrorString", f.error_string);
  bind(h, lib, "nvmlDeviceGetCount_v2", f.count);
  bind(h, lib, "nvmlDeviceGetHandleByIndex_v2", f.by_index);
  bind(h, lib, "nvmlDeviceGetHandleByUUID", f.by_uuid);
  bind(h, lib, "nvmlDeviceGetUUID", f.uuid);
  bind(h, lib, "nvmlDeviceGetPowerManagementLimitConstraints", f.constraints);
  bind(h, lib, "nvmlDeviceGetPowerManagementDefaultLimit", f.default_limit);
  bind(h, lib, "nvmlDeviceGetPowerManagementLimit", f.limit);
  bind(h, lib, "nvmlDeviceSetPowerManagementLimit", f.set_limit);
  bind(h, lib, "nvmlDeviceGetPowerUsage", f.usage);
  // Optional: a library without them still controls limits.
  f.name = reinterpret_cast<decltype(f.name)>(::dlsym(h, "nvmlDeviceGetName"));
  f.clock = reinterpret_cast<decltype(f.clock)>(::dlsym(h, "nvmlDeviceGetClockInfo"));
}

double to_watts(unsigned milliwatts) { return milliwatts / 1000.0; }

// Watts to NVML milliwatts, rounding down so a budget is never exceeded; a
// value that came from to_watts() (a limit being restored) maps back exactly.
unsigned to_milliwatts(double watts) {
  const double milliwatts = watts * 1000.0;
  const double nearest = std::round(milliwatts);
  return static_cast<unsigned>(std::abs(milliwatts - nearest) < 1e-6 ? nearest
                                                                      : std::floor(milliwatts));
}

}  // namespace

struct NvmlPowerController::Library {
  void* handle = nullptr;
  bool initialised = false;
  NvmlFunctions fn;
  std::vector<NvmlDevice> devices;
  std::vector<std::string> names;

  ~Library() {
    if (initialised) fn.shutdown();
    if (handle != nullptr) ::dlclose(handle);
  }

  std::string error(NvmlReturn code) const {
    return fmt::format("{} (NVML error {})", fn.error_string(code), code);
  }

  // Runs an NVML query on one device; failures name the call and the device.
  template <typename... Args>
  void call(int device, const char* what, NvmlReturn (*f)(NvmlDevice, Args...),
            Args... args) const {
    const NvmlReturn code = f(devices[static_cast<std::size_t>(device)], args...);
    if (code != kNvmlSuccess) {
      throw PowerError(fmt::format("NVML: {} of {} failed: {}", what,
                                   names[static_cast<std::size_t>(device)], error(code)));
    }
  }

  void add_device(NvmlDevice device, const std::string& id) {
    char uuid[96] = {};
    const NvmlReturn code = fn.uuid(device, uuid, sizeof uuid);
    devices.push_back(device);
    names.push_back(fmt::format("GPU {} ({})", devices.size() - 1,
                                code == kNvmlSuccess ? std::string(uuid) : id));
  }

  void open_devices(const std::vector<std::string>& ids) {
    if (ids.empty()) {
      unsigned count = 0;
      const NvmlReturn code = fn.count(&count);
      if (code != kNvmlSuccess) throw PowerError("NVML: nvmlDeviceGetCount_v2 failed: " + error(code));
      for (unsigned i = 0; i < count; ++i) open_device(std::to_string(i));
      return;
    }
    for (const std::string& id : ids) open_device(id);
  }

  void open_device(const std::string& id) {
    NvmlDevice device = nullptr;
    const bool by_index = !id.empty() && id.find_first_not_of("0123456789") == std::string::npos;
    const NvmlReturn code = by_index ? fn.by_index(static_cast<unsigned>(std::stoul(id)), &device)
                                     : fn.by_uuid(id.c_str(), &device);
    if (code != kNvmlSuccess) {
      throw PowerError(fmt::format("NVML: no device '{}': {}", id, error(code)));
    }
    add_device(device, id);
  }
};

NvmlPowerController::NvmlPowerController(NvmlOptions options) : nvml_(std::make_unique<Library>()) {
  nvml_->handle = ::dlopen(options.library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (nvml_->handle == nullptr) {
    const char* reason = ::dlerror();
    throw PowerError(fmt::format("NVML not available: {}", reason ? reason : options.library));
  }
  bind_all(nvml_->handle, options.library, nvml_->fn);
  const NvmlReturn code = nvml_->fn.init();
  if (code != kNvmlSuccess) {
    throw PowerError("NVML not available: nvmlInit_v2 failed: " + nvml_->error(code));
  }
  nvml_->initialised = true;
  nvml_->open_devices(options.devices);
}

NvmlPowerController::~NvmlPowerController() = default;

int NvmlPowerController::device_count() const { return static_cast<int>(nvml_->devices.size()); }

std::string NvmlPowerController::device_name(int device) const {
  check_device(device);
  return nvml_->names[static_cast<std::size_t>(device)];
}

LimitRange NvmlPowerController::limit_range(int device) const {
  check_device(device);
  unsigned min_mw = 0;
  unsigned max_mw = 0;
  nvml_->call(device, "power limit constraints", nvml_->fn.constraints, &min_mw, &max_mw);
  return {to_watts(min_mw), to_watts(max_mw)};
}

double NvmlPowerController::default_limit_w(int device) const {
  check_device(device);
  unsigned mw = 0;
  nvml_->call(device, "default power limit", nvml_->fn.default_limit, &mw);
  return to_watts(mw);
}

double NvmlPowerController::get_limit_w(int device) const {
  check_device(device);
  unsigned mw = 0;
  nvml_->call(device, "power limit", nvml_->fn.limit, &mw);
  return to_watts(mw);
}

void NvmlPowerController::set_limit_w(int device, double watts) {
  check_device(device);
  check_limit(device, watts);
  const LimitRange range = limit_range(device);
  const unsigned milliwatts = to_milliwatts(std::clamp(watts, range.min_w, range.max_w));
  const NvmlReturn code =
      nvml_->fn.set_limit(nvml_->devices[static_cast<std::size_t>(device)], milliwatts);
  if (code == kNvmlNoPermission) {
    throw PowerError(fmt::format(
        "NVML: no permission to set the power limit of {}: needs root (or CAP_SYS_ADMIN): {}",
        device_name(device), nvml_->error(code)));
  }
  if (code == kNvmlNotSupported) {
    throw PowerError(fmt::format("NVML: {} does not support setting its power limit: {}",
                                 device_name(device), nvml_->error(code)));
  }
  if (code != kNvmlSuccess) {
    throw PowerError(fmt::format("NVML: setting the power limit of {} to {:.3f} W failed: {}",
                                 device_name(device), watts, nvml_->error(code)));
  }
}

double NvmlPowerController::power_usage_w(int device) const {
  check_device(device);
  unsigned mw = 0;
  nvml_->call(device, "power usage", nvml_->fn.usage, &mw);
  return to_watts(mw);
}

std::string NvmlPowerController::product_name(int device) const {
  check_device(device);
  if (nvml_->fn.name == nullptr) return "";
  char name[96] = {};  // NVML_DEVICE_NAME_V2_BUFFER_SIZE
  const NvmlReturn code = nvml_->fn.name(nvml_->devices[static_cast<std::size_t>(device)], name, sizeof name);
  return code == kNvmlSuccess ? std::string(name) : "";
}

Clocks NvmlPowerController::clocks(int device) const {
  check_device(device);
  Clocks clocks;
  if (nvml_->fn.clock == nullptr) return clocks;
  const auto read = [&](int type) -> std::optional<unsigned> {
    unsigned mhz = 0;
    const NvmlReturn code = nvml_->fn.clock(nvml_->devices[static_cast<std::size_t>(device)], type, &mhz);
    return code == kNvmlSuccess ? std::optional<unsigned>(mhz) : std::nullopt;
  };
  clocks.sm_mhz = read(kNvmlClockSm);
  clocks.mem_mhz = read(kNvmlClockMem);
  return clocks;
}

}  // namespace ntp::power
