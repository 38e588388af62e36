// The fused softmax / cross-entropy over vocabulary-parallel logits
// (cross_entropy.h), one warp per row, in the CPU's three passes (and the
// three in one kernel for a rank that holds the whole vocabulary).
#include <cmath>

#include "tensor/cuda/gpu_impl.h"
#include "tensor/cuda/kernels.h"
#include "tensor/cuda/reduce.cuh"

namespace ntp::tensor::cuda {

namespace {

struct Shape {
  long long rows, cols, valid;
};

__device__ float row_max(const float* row, const Shape& s, int lane) {
  float mx = -INFINITY;
  for (long long j = lane; j < s.valid; j += 32) mx = fmaxf(mx, row[j]);
  return warp_max(mx);
}

// sums[rows + i] = the target's logit (read before the row becomes exps), sums[i] = Σ exp(logit − max).
__device__ void row_sums(float* sums, float* row, long long i, long long target, float max, const Shape& s,
                         int lane) {
  if (lane == 0) sums[s.rows + i] = target >= 0 ? row[target] : 0.0f;
  __syncwarp();
  float sum = 0.0f;
  for (long long j = lane; j < s.valid; j += 32) {
    const float e = expf(row[j] - max);
    row[j] = e;
    sum += e;
  }
  sum = warp_sum(sum);
  if (lane == 0) sums[i] = sum;
  __syncwarp();
}

__device__ void row_finish(float* losses, float* row, long long i, long long target, float max, const float* sums,
                           float dloss_scale, const Shape& s, int lane) {
  const float inv_sum = 1.0f / sums[i];
  const float scale = inv_sum * dloss_scale;
  for (long long j = lane; j < s.cols; j += 32) row[j] = j < s.valid ? row[j] * scale : 0.0f;
  __syncwarp();
  if (lane == 0) {
    losses[i] = logf(sums[i]) + max - sums[s.rows + i];
    if (target >= 0) row[target] -= dloss_scale;
  }
}

__global__ void max_kernel(float* out, const float* logits, Shape s) {
  const long long i = warp_row(s.rows);
  if (i < 0) return;
  const float mx = row_max(logits + i * s.cols, s, threadIdx.x % 32);
  if (threadIdx.x % 32 == 0) out[i] = mx;
}

__global__ void sums_kernel(float* sums, float* logits, const std::int64_t* target_col, const float* max, Shape s) {
  const long long i = warp_row(s.rows);
  if (i < 0) return;
  row_sums(sums, logits + i * s.cols, i, target_col[i], max[i], s, threadIdx.x % 32);
}

__global__ void finish_kernel(float* losses, float* logits, const std::int64_t* target_col, const float* max,
                              const float* sums, float dloss_scale, Shape s) {
  const long long i = warp_row(s.rows);
  if (i < 0) return;
  row_finish(losses, logits + i * s.cols, i, target_col[i], max[i], sums, dloss_scale, s, threadIdx.x % 32);
}

__global__ void local_kernel(float* losses, float* logits, const std::int64_t* target_col, float* sums,
                             float dloss_scale, Shape s) {
  const long long i = warp_row(s.rows);
  if (i < 0) return;
  const int lane = threadIdx.x % 32;
  float* row = logits + i * s.cols;
  const float mx = row_max(row, s, lane);
  row_sums(sums, row, i, target_col[i], mx, s, lane);
  row_finish(losses, row, i, target_col[i], mx, sums, dloss_scale, s, lane);
}

Shape shape_of(const LogitShape& s) { return {s.rows, s.cols, s.valid}; }

}  // namespace

void crossentropy_local_max(Gpu& gpu, float* row_max_out, const float* logits, const LogitShape& shape) {
  if (shape.rows == 0) return;
  max_kernel<<<row_blocks(shape.rows), kRowThreads, 0, gpu.impl().stream>>>(row_max_out, logits, shape_of(shape));
  check_launch("crossentropy_local_max");
}

void crossentropy_local_sums(Gpu& gpu, float* sums, float* logits, const std::int64_t* target_col,
                             const float* row_max_in, const LogitShape& shape) {
  if (shape.rows == 0) return;
  sums_kernel<<<row_blocks(shape.rows), kRowThreads, 0, gpu.impl().stream>>>(sums, logits, target_col, row_max_in,
                                                                            shape_of(shape));
  check_launch("crossentropy_local_sums");
}

void crossentropy_finish(Gpu& gpu, float* losses, float* logits, const std::int64_t* target_col,
                         const float* row_max_in, const float* sums, float dloss_scale, const LogitShape& shape) {
  if (shape.rows == 0) return;
  finish_kernel<<<row_blocks(shape.rows), kRowThreads, 0, gpu.impl().stream>>>(losses, logits, target_col,
                                                                              row_max_in, sums, dloss_scale,
                                                                              shape_of(shape));
  check_launch("crossentropy_finish");
}

void crossentropy_local(Gpu& gpu, float* losses, float* logits, const std::int64_t* target_col, float* scratch,
                        float dloss_scale, const LogitShape& shape) {
  if (shape.rows == 0) return;
  local_kernel<<<row_blocks(shape.rows), kRowThreads, 0, gpu.impl().stream>>>(losses, logits, target_col, scratch,
                                                                             dloss_scale, shape_of(shape));
  check_launch("crossentropy_local");
}

}  // namespace ntp::tensor::cuda
