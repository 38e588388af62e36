// The Gpu of a CUDA build: device selection, the rank's stream and cuBLAS
// handle, memory, copies and the error checks every kernel uses.
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "tensor/cuda/gpu_impl.h"

namespace ntp::tensor {

namespace cuda {
void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  throw std::runtime_error(std::string("cuda: ") + what + ": " + cudaGetErrorName(status) + " (" +
                           cudaGetErrorString(status) + ")");
}

void check(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error(std::string("cublas: ") + what + ": " + cublasGetStatusName(status) + " (" +
                           cublasGetStatusString(status) + ")");
}

void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }
}  // namespace cuda

using cuda::check;

bool cuda_built() { return true; }

int Gpu::count() {
  int n = 0;
  // No driver or no device: 0, and the error is cleared so later calls do not see it.
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

int Gpu::device_for_local_rank() {
  const int n = count();
  const char* local = std::getenv("LOCAL_RANK");
  if (n == 0 || local == nullptr) return 0;
  return std::atoi(local) % n;
}

Gpu::Gpu(int device) : impl_(std::make_unique<Impl>()) {
  const int n = count();
  if (device < 0 || device >= n)
    throw std::runtime_error("cuda device " + std::to_string(device) + ": " + std::to_string(n) +
                             " visible (CUDA_VISIBLE_DEVICES)");
  impl_->device = device;
  check(cudaSetDevice(device), "cudaSetDevice");
  check(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cublasCreate(&impl_->blas), "cublasCreate");
  check(cublasSetStream(impl_->blas, impl_->stream), "cublasSetStream");
  // Plain fp32 products (the default math mode never takes TF32, whose
  // 10-bit mantissa would break the exactness bound against the CPU replay).
  check(cublasSetMathMode(impl_->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
}

Gpu::~Gpu() {
  if (impl_->stream != nullptr) (void)cudaStreamSynchronize(impl_->stream);
  gpu_free(impl_->workspace);
  if (impl_->blas != nullptr) (void)cublasDestroy(impl_->blas);
  if (impl_->stream != nullptr) (void)cudaStreamDestroy(impl_->stream);
}

int Gpu::device() const { return impl_->device; }

std::string Gpu::describe() const {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, impl_->device), "cudaGetDeviceProperties");
  int runtime = 0;
  (void)cudaRuntimeGetVersion(&runtime);
  char memory[32];
  std::snprintf(memory, sizeof memory, "%.1f GiB", static_cast<double>(prop.totalGlobalMem) / (1 << 30));
  return std::string(prop.name) + " (device " + std::to_string(impl_->device) + " of " +
         std::to_string(count()) + ", sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ", " +
         memory + ", CUDA " + std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10) + ")";
}

void* Gpu::alloc(std::size_t bytes) {
  void* p = nullptr;
  const cudaError_t status = cudaMalloc(&p, bytes);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    std::size_t free_bytes = 0, total = 0;
    (void)cudaMemGetInfo(&free_bytes, &total);
    throw std::runtime_error("cuda device " + std::to_string(impl_->device) + ": cannot allocate " +
                             std::to_string(bytes >> 20) + " MiB (" + std::to_string(free_bytes >> 20) +
                             " MiB free of " + std::to_string(total >> 20) + "): " + cudaGetErrorString(status));
  }
  return p;
}

void Gpu::upload(void* device_dst, const void* host_src, std::size_t bytes) {
  if (bytes == 0) return;
  check(cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, impl_->stream), "upload");
  synchronize();
}

void Gpu::download(void* host_dst, const void* device_src, std::size_t bytes) {
  if (bytes == 0) return;
  check(cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, impl_->stream), "download");
  synchronize();
}

void Gpu::zero(void* device_dst, std::size_t bytes) {
  if (bytes == 0) return;
  check(cudaMemsetAsync(device_dst, 0, bytes, impl_->stream), "memset");
}

void Gpu::synchronize() { check(cudaStreamSynchronize(impl_->stream), "a kernel on the rank's stream"); }

float* Gpu::workspace(std::size_t count) {
  if (count <= impl_->workspace_count) return impl_->workspace;
  synchronize();  // kernels queued on the old block finish before it goes
  gpu_free(impl_->workspace);
  impl_->workspace = nullptr;
  impl_->workspace_count = 0;
  impl_->workspace = static_cast<float*>(alloc(count * sizeof(float)));
  impl_->workspace_count = count;
  return impl_->workspace;
}

void gpu_free(void* device_ptr) {
  if (device_ptr != nullptr) (void)cudaFree(device_ptr);
}

}  // namespace ntp::tensor
