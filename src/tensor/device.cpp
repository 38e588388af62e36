#include "tensor/gpu.h"

namespace ntp::tensor {

std::optional<Device> parse_device(std::string_view name) {
  if (name == "cpu") return Device::kCpu;
  if (name == "cuda") return Device::kCuda;
  return std::nullopt;
}

std::string_view device_name(Device device) { return device == Device::kCuda ? "cuda" : "cpu"; }

}  // namespace ntp::tensor
