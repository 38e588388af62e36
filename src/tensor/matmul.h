#pragma once
// Linear layers through the Context's sgemm library, split across its pool. A weight is stored either with one row
// per output (kOutIn: column-parallel layers, whose units are output rows) or
// with one row per input (kInOut: row-parallel layers stored transposed, whose
// units are input rows). Backward kernels accumulate (+=), as in llm.c.
#include <cstdint>

#include "tensor/context.h"

namespace ntp::tensor {

enum class WeightLayout { kOutIn, kInOut };

// Roundings of a linear layer's inputs that its caller keeps, for bf16 GEMMs
// (ignored by fp32 GEMMs). Each is dense, n rows of the operand's width. They
// spare rounding the same activation twice (forward and dW) and rounding from
// memory what a producer can round while it is in cache.
//   inp:  matmul_forward writes inp's rounding here (nothing when n, in_dim
//         or out_dim is 0); matmul_backward's dW GEMM reads it instead of
//         rounding inp again, so it must hold what the forward wrote for the
//         same, unchanged inp.
//   dout: matmul_backward reads dout's rounding here (written by dout's producer).
struct KeptBf16 {
  Bf16* inp = nullptr;
  const Bf16* dout = nullptr;
};

// out[n, out_dim] = inp[n, in_dim] · W + bias (bias may be null).
void matmul_forward(Context& ctx, float* out, const float* inp, const float* weight, const float* bias,
                    std::int64_t n, std::int64_t in_dim, std::int64_t out_dim, WeightLayout layout,
                    KeptBf16 kept = {});

// What a backward GEMM does with the old values of its output: add onto them,
// or overwrite them (a GEMM with beta 0), which spares clearing a buffer first
// and gives the same bits as adding onto zeros.
enum class Into { kAdd, kOverwrite };
struct BackwardInto {
  Into dinp = Into::kAdd;
  Into dweight = Into::kAdd;
};

// dinp += dout · Wᵀ, dweight += (inpᵀ · dout in the weight's layout), dbias += column sums
// of dout (dinp and dweight overwritten instead where `into` says so). Any of
// dinp, dweight, dbias may be null to skip it.
void matmul_backward(Context& ctx, float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, std::int64_t n, std::int64_t in_dim,
                     std::int64_t out_dim, WeightLayout layout, BackwardInto into = {}, KeptBf16 kept = {});

// out[i] = to_bf16(x[i]) for count elements, split over the pool (a model's
// weights, rounded once for the GEMMs that read them: Context::set_rounded_copy).
void round_to_bf16(Context& ctx, const float* x, std::int64_t count, Bf16* out);

// c[m, k] = alpha · op(a) · op(b) + beta · c, row-major; op transposes when asked.
// The output is split into one block of rows (or columns, when it is wider than
// tall) per pool thread, each computed whole by one library call: an element's
// result depends on the shapes and the thread count, never on timing.
void gemm(Context& ctx, bool trans_a, bool trans_b, std::int64_t m, std::int64_t k_out, std::int64_t inner,
          float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
          float beta, float* c, std::int64_t ldc);

// dbias[j] += sum_i dout[i, j], rows added in order: split by column over the
// pool, so the bits do not depend on the thread count.
void bias_backward(Context& ctx, float* dbias, const float* dout, std::int64_t n, std::int64_t dim);

}  // namespace ntp::tensor
