// Causal attention on cuBLAS strided-batched products, one head at a time
// over the batch (llm.c's layout of the work, on the unit-major qkv rows of
// attention.h):
//   forward   S = scale Q·Kᵀ into att, softmax over the causal prefix of each
//             row (0 above the diagonal), out = P·V
//   backward  dP = dOut·Vᵀ, dV += Pᵀ·dOut, dS = scale P ⊙ (dP − rowsum(P ⊙ dP)),
//             dQ += dS·K, dK += dSᵀ·Q
// A GQA group's query heads add into their shared dK and dV one after another
// on the stream, so the accumulation needs no atomics.
#include <cmath>
#include <climits>
#include <stdexcept>

#include "tensor/cuda/gpu_impl.h"
#include "tensor/cuda/kernels.h"
#include "tensor/cuda/reduce.cuh"

namespace ntp::tensor::cuda {

namespace {

// Where head h's q, k and v start in a qkv row.
struct HeadColumns {
  long long q, k, v;
};
HeadColumns columns_of(const AttentionShape& s, long long h) {
  const long long g = h / s.group, base = g * (s.group + 2) * s.head_dim;
  return {base + h % s.group * s.head_dim, base + s.group * s.head_dim, base + (s.group + 1) * s.head_dim};
}

// C_b = alpha op(A_b) op(B_b) + beta C_b for b < batch, row-major (see gemm.cu).
void batched(Gpu& gpu, bool trans_a, bool trans_b, long long m, long long k_out, long long inner, float alpha,
             const float* a, long long lda, long long stride_a, const float* b, long long ldb, long long stride_b,
             float beta, float* c, long long ldc, long long stride_c, long long batch) {
  for (long long v : {m, k_out, inner, lda, ldb, ldc, batch})
    if (v > INT_MAX) throw std::invalid_argument("cuda attention: a dimension exceeds int");
  check(cublasSgemmStridedBatched(gpu.impl().blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(k_out), static_cast<int>(m),
                                  static_cast<int>(inner), &alpha, b, static_cast<int>(ldb), stride_b, a,
                                  static_cast<int>(lda), stride_a, &beta, c, static_cast<int>(ldc), stride_c,
                                  static_cast<int>(batch)),
        "cublasSgemmStridedBatched");
}

// Row r of every [T, T] matrix (rows = matrices * T): the softmax of its first
// t + 1 entries (t = r % T), zeros after them.
__global__ void causal_softmax_kernel(float* att, long long rows, long long seq) {
  const long long r = warp_row(rows);
  if (r < 0) return;
  const int lane = threadIdx.x % 32;
  const long long t = r % seq;
  float* p = att + r * seq;
  float mx = -INFINITY;
  for (long long j = lane; j <= t; j += 32) mx = fmaxf(mx, p[j]);
  mx = warp_max(mx);
  float sum = 0.0f;
  for (long long j = lane; j <= t; j += 32) {
    const float e = expf(p[j] - mx);
    p[j] = e;
    sum += e;
  }
  const float inv = 1.0f / warp_sum(sum);
  for (long long j = lane; j < seq; j += 32) p[j] = j <= t ? p[j] * inv : 0.0f;
}

// dS = scale P ⊙ (dP − Σ_j P_j dP_j) on the causal prefix, 0 above it; dP is
// replaced by dS. P rows are spaced `p_stride` matrices apart per batch.
__global__ void softmax_backward_kernel(float* dp, const float* att, long long rows, long long seq,
                                        long long p_matrix_stride, float scale) {
  const long long r = warp_row(rows);
  if (r < 0) return;
  const int lane = threadIdx.x % 32;
  const long long b = r / seq, t = r % seq;
  const float* p = att + b * p_matrix_stride + t * seq;
  float* d = dp + r * seq;
  float dot = 0.0f;
  for (long long j = lane; j <= t; j += 32) dot += p[j] * d[j];
  dot = warp_sum(dot);
  for (long long j = lane; j < seq; j += 32) d[j] = j <= t ? scale * p[j] * (d[j] - dot) : 0.0f;
}

}  // namespace

void attention_forward(Gpu& gpu, float* out, float* att, const float* qkv, const AttentionShape& s) {
  const long long B = s.batch, T = s.seq, H = s.heads, hd = s.head_dim, R = s.qkv_row();
  if (B * T * H == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (long long h = 0; h < H; ++h) {  // att[b, h] = scale Q Kᵀ
    const HeadColumns c = columns_of(s, h);
    batched(gpu, false, true, T, T, hd, scale, qkv + c.q, R, T * R, qkv + c.k, R, T * R, 0.0f, att + h * T * T, T,
            H * T * T, B);
  }
  causal_softmax_kernel<<<row_blocks(B * H * T), kRowThreads, 0, gpu.impl().stream>>>(att, B * H * T, T);
  check_launch("causal_softmax");
  for (long long h = 0; h < H; ++h) {  // out[b, :, h] = P V
    const HeadColumns c = columns_of(s, h);
    batched(gpu, false, false, T, hd, T, 1.0f, att + h * T * T, T, H * T * T, qkv + c.v, R, T * R, 0.0f,
            out + h * hd, H * hd, T * H * hd, B);
  }
}

void attention_backward(Gpu& gpu, float* dqkv, const float* dout, const float* qkv, const float* att,
                        const AttentionShape& s) {
  const long long B = s.batch, T = s.seq, H = s.heads, hd = s.head_dim, R = s.qkv_row();
  if (B * T * H == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  float* ds = gpu.workspace(static_cast<std::size_t>(B * T * T));  // one head's dP, then dS: [B, T, T]
  for (long long h = 0; h < H; ++h) {
    const HeadColumns c = columns_of(s, h);
    const float* p = att + h * T * T;
    const float* dy = dout + h * hd;
    // dP = dOut Vᵀ
    batched(gpu, false, true, T, T, hd, 1.0f, dy, H * hd, T * H * hd, qkv + c.v, R, T * R, 0.0f, ds, T, T * T, B);
    // dV += Pᵀ dOut
    batched(gpu, true, false, T, hd, T, 1.0f, p, T, H * T * T, dy, H * hd, T * H * hd, 1.0f, dqkv + c.v, R, T * R,
            B);
    softmax_backward_kernel<<<row_blocks(B * T), kRowThreads, 0, gpu.impl().stream>>>(ds, p, B * T, T, H * T * T,
                                                                                     scale);
    check_launch("softmax_backward");
    // dQ += dS K, dK += dSᵀ Q
    batched(gpu, false, false, T, hd, T, 1.0f, ds, T, T * T, qkv + c.k, R, T * R, 1.0f, dqkv + c.q, R, T * R, B);
    batched(gpu, true, false, T, hd, T, 1.0f, ds, T, T * T, qkv + c.q, R, T * R, 1.0f, dqkv + c.k, R, T * R, B);
  }
}

}  // namespace ntp::tensor::cuda
