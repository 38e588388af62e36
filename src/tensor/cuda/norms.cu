// LayerNorm (GPT-2) and RMSNorm (Llama), forward and backward. One warp per
// row for the row-wise parts (statistics, the input gradient); the weight and
// bias gradients are one thread per column adding the rows in order, as the
// CPU does, so they have the CPU's bits.
#include "tensor/cuda/gpu_impl.h"
#include "tensor/cuda/kernels.h"
#include "tensor/cuda/reduce.cuh"

namespace ntp::tensor::cuda {

namespace {

constexpr float kLayerNormEps = 1e-5f;  // as tensor/layernorm.cpp (GPT-2)
constexpr int kColumnThreads = 128;

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, long long n, long long dim) {
  const long long i = warp_row(n);
  if (i < 0) return;
  const int lane = threadIdx.x % 32;
  const float* x = inp + i * dim;
  float sum = 0.0f;
  for (long long j = lane; j < dim; j += 32) sum += x[j];
  const float m = warp_sum(sum) / static_cast<float>(dim);
  float sq = 0.0f;
  for (long long j = lane; j < dim; j += 32) {
    const float d = x[j] - m;
    sq += d * d;
  }
  const float var = warp_sum(sq) / static_cast<float>(dim);
  const float s = 1.0f / sqrtf(var + kLayerNormEps);
  float* y = out + i * dim;
  for (long long j = lane; j < dim; j += 32) y[j] = (x[j] - m) * s * weight[j] + bias[j];
  if (lane == 0) {
    mean[i] = m;
    rstd[i] = s;
  }
}

__global__ void layernorm_backward_rows(float* dinp, const float* dout, const float* inp, const float* weight,
                                        const float* mean, const float* rstd, long long n, long long dim) {
  const long long i = warp_row(n);
  if (i < 0) return;
  const int lane = threadIdx.x % 32;
  const float* x = inp + i * dim;
  const float* dy = dout + i * dim;
  const float m = mean[i], s = rstd[i];
  float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
  for (long long j = lane; j < dim; j += 32) {
    const float xhat = (x[j] - m) * s;
    const float dnorm = weight[j] * dy[j];
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * xhat;
  }
  const float dnorm_mean = warp_sum(dnorm_sum) / static_cast<float>(dim);
  const float dnorm_norm_mean = warp_sum(dnorm_norm_sum) / static_cast<float>(dim);
  float* dx = dinp + i * dim;
  for (long long j = lane; j < dim; j += 32) {
    const float xhat = (x[j] - m) * s;
    const float dnorm = weight[j] * dy[j];
    dx[j] += (dnorm - dnorm_mean - xhat * dnorm_norm_mean) * s;
  }
}

__global__ void layernorm_backward_columns(float* dweight, float* dbias, const float* dout, const float* inp,
                                           const float* mean, const float* rstd, long long n, long long dim) {
  const long long j = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= dim) return;
  float dw = dweight[j], db = dbias[j];
  for (long long i = 0; i < n; ++i) {
    const float dy = dout[i * dim + j];
    db += dy;
    dw += (inp[i * dim + j] - mean[i]) * rstd[i] * dy;
  }
  dweight[j] = dw;
  dbias[j] = db;
}

__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* inp, const float* weight, long long n,
                                       long long dim, float eps) {
  const long long i = warp_row(n);
  if (i < 0) return;
  const int lane = threadIdx.x % 32;
  const float* x = inp + i * dim;
  float sq = 0.0f;
  for (long long j = lane; j < dim; j += 32) sq += x[j] * x[j];
  const float s = 1.0f / sqrtf(warp_sum(sq) / static_cast<float>(dim) + eps);
  float* y = out + i * dim;
  for (long long j = lane; j < dim; j += 32) y[j] = x[j] * s * weight[j];
  if (lane == 0) rstd[i] = s;
}

__global__ void rmsnorm_backward_rows(float* dinp, const float* dout, const float* inp, const float* weight,
                                      const float* rstd, long long n, long long dim) {
  const long long i = warp_row(n);
  if (i < 0) return;
  const int lane = threadIdx.x % 32;
  const float* x = inp + i * dim;
  const float* dy = dout + i * dim;
  const float s = rstd[i];
  float sum = 0.0f;
  for (long long j = lane; j < dim; j += 32) sum += weight[j] * dy[j] * x[j] * s;
  const float dnorm_norm_mean = warp_sum(sum) / static_cast<float>(dim);
  float* dx = dinp + i * dim;
  for (long long j = lane; j < dim; j += 32) dx[j] += (weight[j] * dy[j] - x[j] * s * dnorm_norm_mean) * s;
}

__global__ void rmsnorm_backward_columns(float* dweight, const float* dout, const float* inp, const float* rstd,
                                         long long n, long long dim) {
  const long long j = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= dim) return;
  float dw = dweight[j];
  for (long long i = 0; i < n; ++i) dw += inp[i * dim + j] * rstd[i] * dout[i * dim + j];
  dweight[j] = dw;
}

}  // namespace

void layernorm_forward(Gpu& gpu, float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, std::int64_t n, std::int64_t dim) {
  if (n == 0) return;
  layernorm_forward_kernel<<<row_blocks(n), kRowThreads, 0, gpu.impl().stream>>>(out, mean, rstd, inp, weight,
                                                                                  bias, n, dim);
  check_launch("layernorm_forward");
}

void layernorm_backward(Gpu& gpu, float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, std::int64_t n,
                        std::int64_t dim) {
  if (n == 0 || dim == 0) return;
  cudaStream_t stream = gpu.impl().stream;
  layernorm_backward_rows<<<row_blocks(n), kRowThreads, 0, stream>>>(dinp, dout, inp, weight, mean, rstd, n, dim);
  check_launch("layernorm_backward rows");
  layernorm_backward_columns<<<blocks_for(dim, kColumnThreads), kColumnThreads, 0, stream>>>(
      dweight, dbias, dout, inp, mean, rstd, n, dim);
  check_launch("layernorm_backward columns");
}

void rmsnorm_forward(Gpu& gpu, float* out, float* rstd, const float* inp, const float* weight, std::int64_t n,
                     std::int64_t dim, float eps) {
  if (n == 0) return;
  rmsnorm_forward_kernel<<<row_blocks(n), kRowThreads, 0, gpu.impl().stream>>>(out, rstd, inp, weight, n, dim, eps);
  check_launch("rmsnorm_forward");
}

void rmsnorm_backward(Gpu& gpu, float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, std::int64_t n, std::int64_t dim) {
  if (n == 0 || dim == 0) return;
  cudaStream_t stream = gpu.impl().stream;
  rmsnorm_backward_rows<<<row_blocks(n), kRowThreads, 0, stream>>>(dinp, dout, inp, weight, rstd, n, dim);
  check_launch("rmsnorm_backward rows");
  rmsnorm_backward_columns<<<blocks_for(dim, kColumnThreads), kColumnThreads, 0, stream>>>(dweight, dout, inp, rstd,
                                                                                          n, dim);
  check_launch("rmsnorm_backward columns");
}

}  // namespace ntp::tensor::cuda
