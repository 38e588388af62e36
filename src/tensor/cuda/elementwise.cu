// The elementwise kernels: GELU, SwiGLU, the residual add, clearing, RoPE and
// AdamW, each the CPU loop's formula per element (no FMA contraction: the
// library is built with --fmad=false, so each operation rounds as on the CPU;
// only tanhf / expf differ from the CPU's approximations, by a few ulp).
#include <cmath>
#include <stdexcept>

#include "tensor/cuda/gpu_impl.h"
#include "tensor/cuda/kernels.h"

namespace ntp::tensor::cuda {

namespace {

constexpr int kThreads = 256;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)

__device__ inline long long global_index() { return static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; }

__global__ void gelu_forward_kernel(float* out, const float* inp, long long count) {
  const long long i = global_index();
  if (i >= count) return;
  const float x = inp[i];
  const float cube = 0.044715f * x * x * x;
  out[i] = 0.5f * x * (1.0f + tanhf(kGeluScale * (x + cube)));
}

__global__ void gelu_backward_kernel(float* d, const float* inp, long long count) {
  const long long i = global_index();
  if (i >= count) return;
  const float x = inp[i];
  const float cube = 0.044715f * x * x * x;
  const float t = tanhf(kGeluScale * (x + cube));
  const float sech2 = 1.0f - t * t;
  const float local = 0.5f * (1.0f + t) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
  d[i] *= local;
}

__device__ inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

__global__ void swiglu_forward_kernel(float* out, const float* gate_up, long long count) {
  const long long i = global_index();
  if (i >= count) return;
  const float g = gate_up[2 * i], u = gate_up[2 * i + 1];
  out[i] = g * sigmoid(g) * u;
}

__global__ void swiglu_backward_kernel(float* dgate_up, const float* gate_up, const float* dout, long long count) {
  const long long i = global_index();
  if (i >= count) return;
  const float g = gate_up[2 * i], u = gate_up[2 * i + 1];
  const float s = sigmoid(g);
  dgate_up[2 * i] += dout[i] * u * s * (1.0f + g * (1.0f - s));
  dgate_up[2 * i + 1] += dout[i] * g * s;
}

__global__ void residual_kernel(float* out, const float* residual, const float* x, const float* bias, long long n,
                                long long dim) {
  const long long idx = global_index();
  if (idx >= n * dim) return;
  out[idx] = bias == nullptr ? residual[idx] + x[idx] : residual[idx] + x[idx] + bias[idx % dim];
}

// One thread per (row, rotated head, pair): (x0, x1) -> (x0 c - x1 s, x0 s + x1 c), s = sign * sin.
__global__ void rope_kernel(float* qkv, long long rows, long long seq, long long groups, long long group,
                            long long hd, const float* cos_table, const float* sin_table, float sign) {
  const long long pairs = hd / 2, rotated = group + 1;
  const long long idx = global_index();
  if (idx >= rows * groups * rotated * pairs) return;
  const long long j = idx % pairs;
  const long long head = idx / pairs % (groups * rotated);
  const long long row = idx / (pairs * groups * rotated);
  const long long g = head / rotated, h = head % rotated;
  float* x = qkv + row * groups * (group + 2) * hd + g * (group + 2) * hd + h * hd;
  const long long at = (row % seq) * pairs + j;
  const float c = cos_table[at], sn = sign * sin_table[at];
  const float x0 = x[2 * j], x1 = x[2 * j + 1];
  x[2 * j] = x0 * c - x1 * sn;
  x[2 * j + 1] = x0 * sn + x1 * c;
}

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, long long count, float beta1,
                             float beta2, float lr, float eps, float wd, float scale, float c1, float c2) {
  const long long i = global_index();
  if (i >= count) return;
  const float g = grad[i] * scale;
  const float mi = beta1 * m[i] + (1.0f - beta1) * g;
  const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
  m[i] = mi;
  v[i] = vi;
  param[i] -= lr * (mi * c1 / (sqrtf(vi * c2) + eps) + wd * param[i]);
}

void rope(Gpu& gpu, float* qkv, const AttentionShape& shape, const RopeTable& table, float sign) {
  if (shape.seq > table.positions || shape.head_dim != table.head_dim)
    throw std::invalid_argument("rope: the table does not cover the sequence or head size");
  const long long pairs = shape.head_dim / 2, rows = shape.batch * shape.seq;
  const long long count = rows * shape.groups() * (shape.group + 1) * pairs;
  if (count == 0) return;
  // The rows of the table the sequence uses, cos then sin, in the workspace.
  const std::size_t used = static_cast<std::size_t>(shape.seq * pairs);
  float* cos_table = gpu.workspace(2 * used);
  float* sin_table = cos_table + used;
  gpu.upload(cos_table, table.cos.data(), used * sizeof(float));
  gpu.upload(sin_table, table.sin.data(), used * sizeof(float));
  rope_kernel<<<blocks_for(count, kThreads), kThreads, 0, gpu.impl().stream>>>(
      qkv, rows, shape.seq, shape.groups(), shape.group, shape.head_dim, cos_table, sin_table, sign);
  check_launch("rope");
}

}  // namespace

void gelu_forward(Gpu& gpu, float* out, const float* inp, std::int64_t count) {
  if (count == 0) return;
  gelu_forward_kernel<<<blocks_for(count, kThreads), kThreads, 0, gpu.impl().stream>>>(out, inp, count);
  check_launch("gelu_forward");
}

void gelu_backward(Gpu& gpu, float* d, const float* inp, std::int64_t count) {
  if (count == 0) return;
  gelu_backward_kernel<<<blocks_for(count, kThreads), kThreads, 0, gpu.impl().stream>>>(d, inp, count);
  check_launch("gelu_backward");
}

void swiglu_forward(Gpu& gpu, float* out, const float* gate_up, std::int64_t count) {
  if (count == 0) return;
  swiglu_forward_kernel<<<blocks_for(count, kThreads), kThreads, 0, gpu.impl().stream>>>(out, gate_up, count);
  check_launch("swiglu_forward");
}

void swiglu_backward(Gpu& gpu, float* dgate_up, const float* gate_up, const float* dout, std::int64_t count) {
  if (count == 0) return;
  swiglu_backward_kernel<<<blocks_for(count, kThreads), kThreads, 0, gpu.impl().stream>>>(dgate_up, gate_up, dout,
                                                                                          count);
  check_launch("swiglu_backward");
}

void residual_forward(Gpu& gpu, float* out, const float* residual, const float* x, const float* bias,
                      std::int64_t n, std::int64_t dim) {
  if (n * dim == 0) return;
  residual_kernel<<<blocks_for(n * dim, kThreads), kThreads, 0, gpu.impl().stream>>>(out, residual, x, bias, n,
                                                                                     dim);
  check_launch("residual_forward");
}

void zero(Gpu& gpu, float* x, std::int64_t count) { gpu.zero(x, static_cast<std::size_t>(count) * sizeof(float)); }

void rope_forward(Gpu& gpu, float* qkv, const AttentionShape& shape, const RopeTable& table) {
  rope(gpu, qkv, shape, table, 1.0f);
}

void rope_backward(Gpu& gpu, float* dqkv, const AttentionShape& shape, const RopeTable& table) {
  rope(gpu, dqkv, shape, table, -1.0f);
}

void adamw_update(Gpu& gpu, float* param, const float* grad, float* m, float* v, std::int64_t count,
                  const AdamWStep& s) {
  if (count == 0) return;
  // The bias corrections as the CPU computes them (tensor/adamw.cpp).
  const float c1 = 1.0f / (1.0f - static_cast<float>(std::pow(s.beta1, s.step)));
  const float c2 = 1.0f / (1.0f - static_cast<float>(std::pow(s.beta2, s.step)));
  adamw_kernel<<<blocks_for(count, kThreads), kThreads, 0, gpu.impl().stream>>>(
      param, grad, m, v, count, s.beta1, s.beta2, s.lr, s.eps, s.weight_decay, s.grad_scale, c1, c2);
  check_launch("adamw_update");
}

}  // namespace ntp::tensor::cuda
