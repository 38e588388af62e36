#include "tensor/matmul.h"

#include <algorithm>
#include <chrono>
#include <vector>

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

// A matrix as stored (row-major, leading dimension ld), fp32 or, for bf16
// GEMMs, its rounded copy: at(r, c) is the block starting at stored row r, column c.
struct Operand {
  const float* f = nullptr;
  const Bf16* h = nullptr;
  std::int64_t ld = 0;
  Operand at(std::int64_t r, std::int64_t c) const {
    return {f != nullptr ? f + r * ld + c : nullptr, h != nullptr ? h + r * ld + c : nullptr, ld};
  }
};

// out = the stored [rows, cols] of x rounded to bf16, dense, rows split over
// the pool: the rounding points are the elements themselves, whatever the blocks.
void round_block(Context& ctx, const float* x, std::int64_t rows, std::int64_t cols, std::int64_t ld, Bf16* out) {
  const std::int64_t grain = std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(1, cols));
  ctx.pool().parallel_for(rows, grain, [&](std::int64_t first, std::int64_t last) {
    round_to_bf16(x + first * ld, last - first, cols, ld, out + first * cols);
  });
}

// x's rounding, dense, written into `out` (timed with the GEMMs).
Operand round_into(Context& ctx, const float* x, std::int64_t rows, std::int64_t cols, std::int64_t ld, Bf16* out) {
  const auto start = std::chrono::steady_clock::now();
  round_block(ctx, x, rows, cols, ld, out);
  ctx.add_gemm_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return {nullptr, out, cols};
}

// An operand ready for this context's GEMMs: fp32 as stored, or for bf16 GEMMs
// the weights' rounded copy where x lies inside it, else x rounded into the
// context's scratch `slot` (which it then holds until that slot is reused).
// (rows, cols) are x's as stored.
Operand prepare(Context& ctx, const float* x, std::int64_t rows, std::int64_t cols, std::int64_t ld, int slot) {
  if (ctx.precision() != Precision::kBf16) return {x, nullptr, ld};
  if (const Bf16* copy = ctx.rounded_copy(x, rows, cols, ld)) return {nullptr, copy, ld};
  std::vector<Bf16>& scratch = ctx.bf16_scratch(slot);
  scratch.resize(static_cast<std::size_t>(rows * cols));
  return round_into(ctx, x, rows, cols, ld, scratch.data());
}

// A dense [rows, cols] operand: its kept rounding where the caller has one
// (bf16 GEMMs only), else as prepare() makes it.
Operand prepare_kept(Context& ctx, const float* x, std::int64_t rows, std::int64_t cols, const Bf16* kept,
                     int slot) {
  if (ctx.precision() == Precision::kBf16 && kept != nullptr) return {nullptr, kept, cols};
  return prepare(ctx, x, rows, cols, cols, slot);
}

// A linear layer's weight as stored: [out, in] (kOutIn) or [in, out].
Operand prepare_weight(Context& ctx, const float* weight, std::int64_t in_dim, std::int64_t out_dim,
                       WeightLayout layout) {
  const bool out_in = layout == WeightLayout::kOutIn;
  const std::int64_t cols = out_in ? in_dim : out_dim;
  return prepare(ctx, weight, out_in ? out_dim : in_dim, cols, cols, 1);
}

// C = op(A) op(B) (+ beta C), or, with `row_init`, each row of C set to
// row_init (k_out values) first and the product added onto it: every thread
// fills its own block just before its GEMM, while the block is in its cache.
// A and B come from prepare(): bf16 GEMMs (fp32 accumulation and output) when
// they carry rounded values.
void gemm_blocks(Context& ctx, bool trans_a, bool trans_b, std::int64_t m, std::int64_t k_out,
                 std::int64_t inner, float alpha, Operand A, Operand B, float beta, float* c, std::int64_t ldc,
                 const float* row_init) {
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
  const Bf16Path path = ctx.bf16_path();
  const bool bf16 = ctx.precision() == Precision::kBf16;
  // One block: rows [r, r + rows) of C against columns [col, col + cols).
  const auto run = [&](std::int64_t rows, std::int64_t cols, Operand x, Operand y, float block_beta, float* out) {
    if (bf16) {
      backend_gemm_bf16(path, backend, trans_a, trans_b, rows, cols, inner, alpha, x.h, x.ld, y.h, y.ld,
                        block_beta, out, ldc);
    } else {
      backend_sgemm(backend, trans_a, trans_b, rows, cols, inner, alpha, x.f, x.ld, y.f, y.ld, block_beta, out,
                    ldc);
    }
  };
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
        run(size, k_out, trans_a ? A.at(0, begin) : A.at(begin, 0), B, beta, c + begin * ldc);
      } else {  // columns of C are columns of op(b)
        if (row_init != nullptr)
          for (std::int64_t i = 0; i < m; ++i) std::copy_n(row_init + begin, size, c + i * ldc + begin);
        run(m, size, A, trans_b ? B.at(begin, 0) : B.at(0, begin), beta, c + begin);
      }
    }
  });
  ctx.add_gemm_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace

void round_to_bf16(Context& ctx, const float* x, std::int64_t count, Bf16* out) {
  const auto round = simd::loops().round_bf16;
  ctx.pool().parallel_for(count, 1 << 15, [&](std::int64_t first, std::int64_t last) {
    round(out + first, x + first, last - first);
  });
}

void gemm(Context& ctx, bool trans_a, bool trans_b, std::int64_t m, std::int64_t k_out,
          std::int64_t inner, float alpha, const float* a, std::int64_t lda, const float* b,
          std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  NTP_ON_GPU(ctx, gemm, trans_a, trans_b, m, k_out, inner, alpha, a, lda, b, ldb, beta, c, ldc);
  if (m == 0 || k_out == 0 || inner == 0) {  // nothing to round
    gemm_blocks(ctx, trans_a, trans_b, m, k_out, inner, alpha, {}, {}, beta, c, ldc, nullptr);
    return;
  }
  const Operand A = prepare(ctx, a, trans_a ? inner : m, trans_a ? m : inner, lda, 0);
  const Operand B = prepare(ctx, b, trans_b ? k_out : inner, trans_b ? inner : k_out, ldb, 1);
  gemm_blocks(ctx, trans_a, trans_b, m, k_out, inner, alpha, A, B, beta, c, ldc, nullptr);
}

void matmul_forward(Context& ctx, float* out, const float* inp, const float* weight, const float* bias,
                    std::int64_t n, std::int64_t in_dim, std::int64_t out_dim, WeightLayout layout,
                    KeptBf16 kept) {
  NTP_ON_GPU(ctx, matmul_forward, out, inp, weight, bias, n, in_dim, out_dim, layout);
  // With a bias, each output row starts as the bias and the GEMM adds onto it.
  if (n == 0 || in_dim == 0 || out_dim == 0) {  // nothing to round
    gemm_blocks(ctx, false, false, n, out_dim, in_dim, 1.0f, {}, {}, 0.0f, out, out_dim, bias);
    return;
  }
  const bool keep = ctx.precision() == Precision::kBf16 && kept.inp != nullptr;
  gemm_blocks(ctx, false, layout == WeightLayout::kOutIn, n, out_dim, in_dim, 1.0f,
              keep ? round_into(ctx, inp, n, in_dim, in_dim, kept.inp) : prepare(ctx, inp, n, in_dim, in_dim, 0),
              prepare_weight(ctx, weight, in_dim, out_dim, layout), 0.0f, out, out_dim, bias);
}

void matmul_backward(Context& ctx, float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, std::int64_t n, std::int64_t in_dim,
                     std::int64_t out_dim, WeightLayout layout, BackwardInto into, KeptBf16 kept) {
  NTP_ON_GPU(ctx, matmul_backward, dinp, dweight, dbias, dout, inp, weight, n, in_dim, out_dim, layout, into);
  const bool out_in = layout == WeightLayout::kOutIn;
  const auto beta = [](Into mode) { return mode == Into::kAdd ? 1.0f : 0.0f; };
  // dout feeds both GEMMs: rounded once (scratch slot 0) for bf16, unless
  // its producer has rounded it already.
  // Every GEMM here has extents n, in_dim, out_dim: with one of them 0 there
  // is nothing to round (the GEMMs then only clear or keep their outputs).
  const bool empty = n == 0 || in_dim == 0 || out_dim == 0;
  const Operand d = !empty && (dinp != nullptr || dweight != nullptr)
                        ? prepare_kept(ctx, dout, n, out_dim, kept.dout, 0)
                        : Operand{};
  if (dinp != nullptr) {  // dinp[n, in] += dout[n, out] · Wᵀ
    gemm_blocks(ctx, false, !out_in, n, in_dim, out_dim, 1.0f, d,
                empty ? Operand{} : prepare_weight(ctx, weight, in_dim, out_dim, layout), beta(into.dinp), dinp, in_dim,
                nullptr);
  }
  if (dweight != nullptr) {
    const Operand x = empty ? Operand{} : prepare_kept(ctx, inp, n, in_dim, kept.inp, 1);
    if (out_in) {  // dW[out, in] += doutᵀ · inp
      gemm_blocks(ctx, true, false, out_dim, in_dim, n, 1.0f, d, x, beta(into.dweight), dweight, in_dim, nullptr);
    } else {  // dW[in, out] += inpᵀ · dout
      gemm_blocks(ctx, true, false, in_dim, out_dim, n, 1.0f, x, d, beta(into.dweight), dweight, out_dim, nullptr);
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
