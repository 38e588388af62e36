#include "tensor/matmul.h"

#include <algorithm>
#include <chrono>

#include "tensor/gpu.h"
#include "tensor/simd/loops.h"

namespace ntp::tensor {

namespace {

// Block boundaries fall on multiples of 16 elements (64 bytes), so every
// block's rows or columns start cache-line aligned when the whole matrix does.
constexpr std::int64_t kBlockAlign = 16;
constexpr std::int64_t kBiasColumnGrain = 64;

std::int64_t block_begin(std::int64_t extent, std::int64_t blocks, std::int64_t index) {
  const std::int64_t units = (extent + kBlockAlign - 1) / kBlockAlign;
  return std::min(extent, units * index / blocks * kBlockAlign);
}

// C = op(a) op(b) (+ beta C), or, with `row_init`, each row of C set to
// row_init (k_out values) first and the product added onto it: every thread
// fills its own block just before its sgemm, while the block is in its cache.
void gemm_blocks(Context& ctx, bool trans_a, bool trans_b, std::int64_t m, std::int64_t k_out,
                 std::int64_t inner, float alpha, const float* a, std::int64_t lda, const float* b,
                 std::int64_t ldb, float beta, float* c, std::int64_t ldc, const float* row_init) {
  if (m == 0 || k_out == 0) return;  // a rank may hold no units of a kind
  if (inner == 0) {
    // Nothing to multiply: C = beta * C (or the rows), which BLAS would do,
    // but with empty operands some BLAS builds reject the leading dimensions.
    // Beta 0 ignores C's old values, NaN included.
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < k_out; ++j)
        c[i * ldc + j] = row_init != nullptr ? row_init[j] : beta == 0.0f ? 0.0f : c[i * ldc + j] * beta;
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  const GemmBackend backend = ctx.gemm_backend();
  const bool by_rows = m >= k_out;
  const std::int64_t extent = by_rows ? m : k_out;
  const std::int64_t blocks =
      std::min<std::int64_t>(ctx.pool().threads(), (extent + kBlockAlign - 1) / kBlockAlign);
  if (row_init != nullptr) beta = 1.0f;
  ctx.pool().parallel_for(blocks, 1, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t block = first; block < last; ++block) {
      const std::int64_t begin = block_begin(extent, blocks, block);
      const std::int64_t size = block_begin(extent, blocks, block + 1) - begin;
      if (size == 0) continue;
      if (by_rows) {  // rows of C are rows of op(a)
        if (row_init != nullptr)
          for (std::int64_t i = begin; i < begin + size; ++i) std::copy_n(row_init, k_out, c + i * ldc);
        backend_sgemm(backend, trans_a, trans_b, size, k_out, inner, alpha,
                      trans_a ? a + begin : a + begin * lda, lda, b, ldb, beta, c + begin * ldc, ldc);
      } else {  // columns of C are columns of op(b)
        if (row_init != nullptr)
          for (std::int64_t i = 0; i < m; ++i) std::copy_n(row_init + begin, size, c + i * ldc + begin);
        backend_sgemm(backend, trans_a, trans_b, m, size, inner, alpha, a, lda,
                      trans_b ? b + begin * ldb : b + begin, ldb, beta, c + begin, ldc);
      }
    }
  });
  ctx.add_gemm_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace

void gemm(Context& ctx, bool trans_a, bool trans_b, std::int64_t m, std::int64_t k_out,
          std::int64_t inner, float alpha, const float* a, std::int64_t lda, const float* b,
          std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  NTP_ON_GPU(ctx, gemm, trans_a, trans_b, m, k_out, inner, alpha, a, lda, b, ldb, beta, c, ldc);
  gemm_blocks(ctx, trans_a, trans_b, m, k_out, inner, alpha, a, lda, b, ldb, beta, c, ldc, nullptr);
}

void matmul_forward(Context& ctx, float* out, const float* inp, const float* weight, const float* bias,
                    std::int64_t n, std::int64_t in_dim, std::int64_t out_dim, WeightLayout layout) {
  NTP_ON_GPU(ctx, matmul_forward, out, inp, weight, bias, n, in_dim, out_dim, layout);
  // With a bias, each output row starts as the bias and the GEMM adds onto it.
  if (layout == WeightLayout::kOutIn) {
    gemm_blocks(ctx, false, true, n, out_dim, in_dim, 1.0f, inp, in_dim, weight, in_dim, 0.0f, out, out_dim, bias);
  } else {
    gemm_blocks(ctx, false, false, n, out_dim, in_dim, 1.0f, inp, in_dim, weight, out_dim, 0.0f, out, out_dim, bias);
  }
}

void matmul_backward(Context& ctx, float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, std::int64_t n, std::int64_t in_dim,
                     std::int64_t out_dim, WeightLayout layout, BackwardInto into) {
  NTP_ON_GPU(ctx, matmul_backward, dinp, dweight, dbias, dout, inp, weight, n, in_dim, out_dim, layout, into);
  const bool out_in = layout == WeightLayout::kOutIn;
  const auto beta = [](Into mode) { return mode == Into::kAdd ? 1.0f : 0.0f; };
  if (dinp != nullptr) {  // dinp[n, in] += dout[n, out] · Wᵀ
    gemm(ctx, false, !out_in, n, in_dim, out_dim, 1.0f, dout, out_dim, weight,
         out_in ? in_dim : out_dim, beta(into.dinp), dinp, in_dim);
  }
  if (dweight != nullptr) {
    if (out_in) {  // dW[out, in] += doutᵀ · inp
      gemm(ctx, true, false, out_dim, in_dim, n, 1.0f, dout, out_dim, inp, in_dim,
           beta(into.dweight), dweight, in_dim);
    } else {  // dW[in, out] += inpᵀ · dout
      gemm(ctx, true, false, in_dim, out_dim, n, 1.0f, inp, in_dim, dout, out_dim,
           beta(into.dweight), dweight, out_dim);
    }
  }
  if (dbias != nullptr) bias_backward(ctx, dbias, dout, n, out_dim);
}

void bias_backward(Context& ctx, float* dbias, const float* dout, std::int64_t n, std::int64_t dim) {
  NTP_ON_GPU(ctx, bias_backward, dbias, dout, n, dim);
  // Row by row within a block of columns, so the inner loop is contiguous
  // (the SIMD axpy; 1 * x is exact, so it adds the same bits as +=).
  const simd::Loops& loops = simd::loops();
  ctx.pool().parallel_for(dim, kBiasColumnGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = 0; i < n; ++i) loops.axpy(dbias + begin, 1.0f, dout + i * dim + begin, end - begin);
  });
}

}  // namespace ntp::tensor
