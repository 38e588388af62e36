// The vocabulary-parallel embedding's kernels (model/vocab_parallel.h): the
// row gather, the learned positions, and the backward scatters, which add in
// the CPU's order (position order per row) so their sums have its bits.
#include "tensor/cuda/gpu_impl.h"
#include "tensor/cuda/kernels.h"

namespace ntp::tensor::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void gather_kernel(float* out, const std::int64_t* cols, const float* rows, long long n, long long dim) {
  const long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n * dim) return;
  const long long i = idx / dim, j = idx % dim;
  const long long col = cols[i];
  out[idx] = col >= 0 ? rows[col * dim + j] : 0.0f;
}

__global__ void add_positions_kernel(float* out, const float* wpe, long long n, long long seq, long long dim) {
  const long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n * dim) return;
  out[idx] += wpe[(idx / dim % seq) * dim + idx % dim];
}

// One thread per (position t, element j): dwpe[t, j] += dout[b seq + t, j] for b in order.
__global__ void positions_backward_kernel(float* dwpe, const float* dout, long long n, long long seq, long long dim) {
  const long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= seq * dim) return;
  const long long t = idx / dim, j = idx % dim;
  float acc = dwpe[idx];
  for (long long i = t; i < n; i += seq) acc += dout[i * dim + j];
  dwpe[idx] = acc;
}

// One block per group (distinct row), threads over the row's elements.
__global__ void rows_backward_kernel(float* drows, const std::int64_t* row, const std::int64_t* start,
                                     const std::int64_t* positions, const float* dout, long long dim) {
  const long long g = blockIdx.x;
  float* d = drows + row[g] * dim;
  for (long long j = threadIdx.x; j < dim; j += blockDim.x) {
    float acc = d[j];
    for (long long k = start[g]; k < start[g + 1]; ++k) acc += dout[positions[k] * dim + j];
    d[j] = acc;
  }
}

}  // namespace

void embedding_gather(Gpu& gpu, float* out, const std::int64_t* cols, const float* rows, std::int64_t n,
                      std::int64_t dim) {
  if (n * dim == 0) return;
  gather_kernel<<<blocks_for(n * dim, kThreads), kThreads, 0, gpu.impl().stream>>>(out, cols, rows, n, dim);
  check_launch("embedding_gather");
}

void embedding_add_positions(Gpu& gpu, float* out, const float* wpe, std::int64_t n, std::int64_t seq,
                             std::int64_t dim) {
  if (n * dim == 0) return;
  add_positions_kernel<<<blocks_for(n * dim, kThreads), kThreads, 0, gpu.impl().stream>>>(out, wpe, n, seq, dim);
  check_launch("embedding_add_positions");
}

void embedding_positions_backward(Gpu& gpu, float* dwpe, const float* dout, std::int64_t n, std::int64_t seq,
                                  std::int64_t dim) {
  if (seq * dim == 0) return;
  positions_backward_kernel<<<blocks_for(seq * dim, kThreads), kThreads, 0, gpu.impl().stream>>>(dwpe, dout, n, seq,
                                                                                                dim);
  check_launch("embedding_positions_backward");
}

void embedding_rows_backward(Gpu& gpu, float* drows, const std::int64_t* row, const std::int64_t* start,
                             const std::int64_t* positions, std::int64_t groups, const float* dout,
                             std::int64_t dim) {
  if (groups == 0 || dim == 0) return;
  rows_backward_kernel<<<static_cast<unsigned>(groups), kThreads, 0, gpu.impl().stream>>>(drows, row, start,
                                                                                         positions, dout, dim);
  check_launch("embedding_rows_backward");
}

}  // namespace ntp::tensor::cuda
