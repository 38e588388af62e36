#pragma once
// One rank's GPU: the device it runs on, one stream that every kernel and copy
// of the rank goes through (in order, so no kernel waits on an event), a
// cuBLAS handle bound to that stream and a grow-only scratch workspace. A
// Context made with device cuda owns one; the kernels in tensor/*.cpp run
// their cuda:: twin (tensor/cuda/kernels.h) on it and return.
//
// Copies to and from the host are synchronous (they wait for the stream), so
// a host reader never sees a value a kernel has not finished writing. Every
// CUDA error is a std::runtime_error that names the call and the device.
//
// Built without CUDA (no toolkit found), Gpu::count() is 0 and making a Gpu
// throws; the rest of the project builds and runs unchanged.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace ntp::tensor {

// Where a context's kernels run: the host's cores, or a CUDA GPU.
enum class Device { kCpu, kCuda };
inline constexpr std::string_view kDeviceNames = "cpu | cuda";
std::optional<Device> parse_device(std::string_view name);
std::string_view device_name(Device device);

// Whether this build has the CUDA backend (a toolkit was found at configure time).
bool cuda_built();

class Gpu {
 public:
  // Visible CUDA devices (CUDA_VISIBLE_DEVICES honoured); 0 without CUDA
  // support, without a driver, or without a device.
  static int count();
  // The device a rank uses: LOCAL_RANK modulo the visible devices (0 when
  // LOCAL_RANK is unset), so ranks beyond the device count share GPUs.
  static int device_for_local_rank();

  // Binds the calling thread to `device` and makes the stream and handles.
  // Throws std::runtime_error naming the device if it cannot.
  explicit Gpu(int device);
  ~Gpu();
  Gpu(const Gpu&) = delete;
  Gpu& operator=(const Gpu&) = delete;

  int device() const;
  // "NVIDIA H200 (device 0 of 1, sm_90, 139.8 GiB, CUDA 13.0)"
  std::string describe() const;

  // Device memory; throws naming the size and the memory free on failure.
  void* alloc(std::size_t bytes);
  void upload(void* device_dst, const void* host_src, std::size_t bytes);
  void download(void* host_dst, const void* device_src, std::size_t bytes);
  void zero(void* device_dst, std::size_t bytes);  // queued on the stream
  // Waits for every queued kernel; throws naming the first error.
  void synchronize();
  // At least `count` floats of scratch on the device, valid until the next
  // call of workspace() (kernels queued before then still see it: the
  // stream runs them in order, and the old block is freed only after a sync).
  float* workspace(std::size_t count);

  // The CUDA objects, for the kernels in tensor/cuda/ (opaque elsewhere).
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// Frees memory from Gpu::alloc (any device; null is ignored). A free function,
// so a buffer may outlive the Gpu that made it.
void gpu_free(void* device_ptr);

}  // namespace ntp::tensor

// In a kernel of tensor/*.cpp: when the context runs on a GPU, run the
// kernel's cuda:: twin on it with the same arguments and return. Compiles to nothing without CUDA,
// where no context has a GPU.
#if NTP_HAVE_CUDA
#include "tensor/cuda/kernels.h"
#define NTP_ON_GPU(ctx, kernel, ...)                      \
  do {                                                   \
    if (::ntp::tensor::Gpu* on_gpu_ = (ctx).gpu()) {     \
      ::ntp::tensor::cuda::kernel(*on_gpu_, __VA_ARGS__); \
      return;                                            \
    }                                                    \
  } while (0)
#else
#define NTP_ON_GPU(ctx, kernel, ...) (void)(ctx)
#endif
