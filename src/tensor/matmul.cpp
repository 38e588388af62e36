#include "tensor/matmul.h"

#include <cblas.h>

#include <algorithm>

namespace ntp::tensor {

void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t k_out, std::int64_t inner,
          float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
          float beta, float* c, std::int64_t ldc) {
  if (m == 0 || k_out == 0) return;  // a rank may hold no units of a kind
  if (inner == 0) {
    // Nothing to multiply: C = beta * C, which BLAS would do, but with empty
    // operands some BLAS builds reject the leading dimensions.
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < k_out; ++j) c[i * ldc + j] *= beta;
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(k_out), static_cast<blasint>(inner), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    std::int64_t n, std::int64_t in_dim, std::int64_t out_dim, WeightLayout layout) {
  float beta = 0.0f;
  if (bias != nullptr) {  // start from the bias so the GEMM adds onto it in one pass
    for (std::int64_t i = 0; i < n; ++i) std::copy(bias, bias + out_dim, out + i * out_dim);
    beta = 1.0f;
  }
  if (layout == WeightLayout::kOutIn) {
    gemm(false, true, n, out_dim, in_dim, 1.0f, inp, in_dim, weight, in_dim, beta, out, out_dim);
  } else {
    gemm(false, false, n, out_dim, in_dim, 1.0f, inp, in_dim, weight, out_dim, beta, out, out_dim);
  }
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, std::int64_t n, std::int64_t in_dim,
                     std::int64_t out_dim, WeightLayout layout) {
  const bool out_in = layout == WeightLayout::kOutIn;
  if (dinp != nullptr) {  // dinp[n, in] += dout[n, out] · Wᵀ
    gemm(false, !out_in, n, in_dim, out_dim, 1.0f, dout, out_dim, weight,
         out_in ? in_dim : out_dim, 1.0f, dinp, in_dim);
  }
  if (dweight != nullptr) {
    if (out_in) {  // dW[out, in] += doutᵀ · inp
      gemm(true, false, out_dim, in_dim, n, 1.0f, dout, out_dim, inp, in_dim, 1.0f, dweight,
           in_dim);
    } else {  // dW[in, out] += inpᵀ · dout
      gemm(true, false, in_dim, out_dim, n, 1.0f, inp, in_dim, dout, out_dim, 1.0f, dweight,
           out_dim);
    }
  }
  if (dbias != nullptr) bias_backward(dbias, dout, n, out_dim);
}

void bias_backward(float* dbias, const float* dout, std::int64_t n, std::int64_t dim) {
  // Row by row so the inner loop is contiguous and vectorises.
  for (std::int64_t i = 0; i < n; ++i) {
    const float* row = dout + i * dim;
    for (std::int64_t j = 0; j < dim; ++j) dbias[j] += row[j];
  }
}

}  // namespace ntp::tensor
