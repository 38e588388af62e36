#pragma once
// What a Gpu holds (tensor/gpu.h), for the CUDA code of tensor/cuda/ alone,
// and the checks that turn a CUDA or cuBLAS status into an exception naming
// the call.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "tensor/gpu.h"

namespace ntp::tensor {

struct Gpu::Impl {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  float* workspace = nullptr;
  std::size_t workspace_count = 0;
};

namespace cuda {
// Throw std::runtime_error("cuda: <what>: <error name and text>") on failure.
void check(cudaError_t status, const char* what);
void check(cublasStatus_t status, const char* what);
// After a kernel launch: a bad configuration shows up here, a fault at the
// next synchronize.
void check_launch(const char* kernel);

// Blocks of `threads` covering `count` items.
inline unsigned blocks_for(std::int64_t count, int threads) {
  return static_cast<unsigned>((count + threads - 1) / threads);
}
}  // namespace cuda

}  // namespace ntp::tensor
