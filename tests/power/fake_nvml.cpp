// A test fixture with NVML's C ABI (the functions NvmlPowerController binds),
// built as a shared library and loaded through NvmlOptions::library. It lets
// the tests drive the NVML backend's real dlopen/dlsym path and its error
// handling (permission denied, unknown device, milliwatt rounding) on a host
// without a GPU. Two devices, limits in milliwatts, as NVML reports them;
// device 0 reports its clocks, device 1 does not support the clock query.
#include <cstring>

namespace {

struct FakeDevice {
  const char* uuid;
  unsigned limit_mw;
};

FakeDevice g_devices[2] = {{"GPU-fake-0", 700000}, {"GPU-fake-1", 700000}};
bool g_allow_set = false;
constexpr unsigned kMinMw = 200000;
constexpr unsigned kMaxMw = 900000;
constexpr unsigned kDefaultMw = 700000;
constexpr unsigned kUsageMw = 123456;

// nvmlReturn_t values used here.
constexpr int kSuccess = 0;
constexpr int kInvalidArgument = 2;
constexpr int kNotSupported = 3;
constexpr int kNoPermission = 4;
constexpr int kNotFound = 6;

FakeDevice* device_of(void* handle) { return static_cast<FakeDevice*>(handle); }

}  // namespace

extern "C" {

// Test controls.
void fake_nvml_allow_set(int allow) { g_allow_set = allow != 0; }
unsigned fake_nvml_limit_mw(int device) { return g_devices[device].limit_mw; }

int nvmlInit_v2() { return kSuccess; }
int nvmlShutdown() { return kSuccess; }
const char* nvmlErrorString(int code) {
  if (code == kNoPermission) return "Insufficient Permissions";
  if (code == kNotFound) return "Not Found";
  return code == kSuccess ? "Success" : "Invalid Argument";
}
int nvmlDeviceGetCount_v2(unsigned* count) {
  *count = 2;
  return kSuccess;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** device) {
  if (index >= 2) return kInvalidArgument;
  *device = &g_devices[index];
  return kSuccess;
}
int nvmlDeviceGetHandleByUUID(const char* uuid, void** device) {
  for (FakeDevice& d : g_devices) {
    if (std::strcmp(d.uuid, uuid) == 0) {
      *device = &d;
      return kSuccess;
    }
  }
  return kNotFound;
}
int nvmlDeviceGetUUID(void* device, char* uuid, unsigned length) {
  std::strncpy(uuid, device_of(device)->uuid, length - 1);
  return kSuccess;
}
int nvmlDeviceGetPowerManagementLimitConstraints(void*, unsigned* min_mw, unsigned* max_mw) {
  *min_mw = kMinMw;
  *max_mw = kMaxMw;
  return kSuccess;
}
int nvmlDeviceGetPowerManagementDefaultLimit(void*, unsigned* mw) {
  *mw = kDefaultMw;
  return kSuccess;
}
int nvmlDeviceGetPowerManagementLimit(void* device, unsigned* mw) {
  *mw = device_of(device)->limit_mw;
  return kSuccess;
}
int nvmlDeviceSetPowerManagementLimit(void* device, unsigned mw) {
  if (!g_allow_set) return kNoPermission;
  if (mw < kMinMw || mw > kMaxMw) return kInvalidArgument;
  device_of(device)->limit_mw = mw;
  return kSuccess;
}
int nvmlDeviceGetPowerUsage(void*, unsigned* mw) {
  *mw = kUsageMw;
  return kSuccess;
}
int nvmlDeviceGetName(void*, char* name, unsigned length) {
  std::strncpy(name, "NVIDIA Fake H200", length - 1);
  return kSuccess;
}
// nvmlClockType_t: 0 graphics, 1 SM, 2 memory, 3 video.
int nvmlDeviceGetClockInfo(void* device, int type, unsigned* mhz) {
  if (device != &g_devices[0]) return kNotSupported;
  if (type == 1) *mhz = 1980;
  else if (type == 2) *mhz = 3201;
  else return kInvalidArgument;
  return kSuccess;
}

}  // extern "C"
