#pragma once
// Linear layers through OpenBLAS sgemm. A weight is stored either with one row
// per output (kOutIn: column-parallel layers, whose units are output rows) or
// with one row per input (kInOut: row-parallel layers stored transposed, whose
// units are input rows). Backward kernels accumulate (+=), as in llm.c.
#include <cstdint>

namespace ntp::tensor {

enum class WeightLayout { kOutIn, kInOut };

// out[n, out_dim] = inp[n, in_dim] · W + bias (bias may be null).
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    std::int64_t n, std::int64_t in_dim, std::int64_t out_dim, WeightLayout layout);

// dinp += dout · Wᵀ, dweight += (inpᵀ · dout in the weight's layout), dbias += column sums
// of dout. Any of dinp, dweight, dbias may be null to skip it.
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, std::int64_t n, std::int64_t in_dim,
                     std::int64_t out_dim, WeightLayout layout);

// c[m, k] = alpha · op(a) · op(b) + beta · c, row-major; op transposes when asked.
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t k_out, std::int64_t inner,
          float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
          float beta, float* c, std::int64_t ldc);

// dbias[j] += sum_i dout[i, j]
void bias_backward(float* dbias, const float* dout, std::int64_t n, std::int64_t dim);

}  // namespace ntp::tensor
