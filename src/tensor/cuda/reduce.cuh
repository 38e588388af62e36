#pragma once
// Warp-level sums for the row kernels: each of a warp's 32 lanes holds a
// partial sum; after warp_sum every lane holds the total.

namespace ntp::tensor::cuda {

__device__ inline float warp_sum(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

__device__ inline float warp_max(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

// One warp per row: the row this warp works on, or -1 past the end.
__device__ inline long long warp_row(long long rows) {
  const long long row = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  return row < rows ? row : -1;
}

constexpr int kRowThreads = 256;  // 8 rows (warps) per block
inline unsigned row_blocks(long long rows) { return static_cast<unsigned>((rows * 32 + kRowThreads - 1) / kRowThreads); }

}  // namespace ntp::tensor::cuda
