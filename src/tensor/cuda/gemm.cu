// GEMMs on cuBLAS. The project's matrices are row-major; cuBLAS's are
// column-major, and a row-major C[m, k] is the column-major Cᵀ[k, m], so
// C = op(A) op(B) is computed as Cᵀ = op(B)ᵀ op(A)ᵀ: the operands swap places
// and keep their transposes.
#include <climits>
#include <stdexcept>
#include <string>

#include "tensor/cuda/gpu_impl.h"
#include "tensor/cuda/kernels.h"

namespace ntp::tensor::cuda {

namespace {

int narrow(std::int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) throw std::invalid_argument(std::string("cuda gemm: ") + what + " " + std::to_string(v) + " outside int");
  return static_cast<int>(v);
}

// c[i, j] = beta * c[i, j] (0 for beta 0, whatever c held), or row_init[j].
__global__ void scale_or_init_kernel(float* c, std::int64_t m, std::int64_t k, std::int64_t ldc, float beta,
                                     const float* row_init) {
  const std::int64_t idx = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= m * k) return;
  const std::int64_t i = idx / k, j = idx % k;
  float& x = c[i * ldc + j];
  x = row_init != nullptr ? row_init[j] : beta == 0.0f ? 0.0f : x * beta;
}

void scale_or_init(Gpu& gpu, float* c, std::int64_t m, std::int64_t k, std::int64_t ldc, float beta,
                   const float* row_init) {
  if (m == 0 || k == 0) return;
  scale_or_init_kernel<<<blocks_for(m * k, 256), 256, 0, gpu.impl().stream>>>(c, m, k, ldc, beta, row_init);
  check_launch("scale_or_init");
}

// dbias[j] += sum_i dout[i, j], one thread per column adding the rows in
// order: the CPU's order, so the same bits.
__global__ void bias_backward_kernel(float* dbias, const float* dout, std::int64_t n, std::int64_t dim) {
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= dim) return;
  float acc = dbias[j];
  for (std::int64_t i = 0; i < n; ++i) acc += dout[i * dim + j];
  dbias[j] = acc;
}

}  // namespace

void gemm(Gpu& gpu, bool trans_a, bool trans_b, std::int64_t m, std::int64_t k_out, std::int64_t inner,
          float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
          std::int64_t ldc) {
  if (m == 0 || k_out == 0) return;
  if (inner == 0) return scale_or_init(gpu, c, m, k_out, ldc, beta, nullptr);
  check(cublasSgemm(gpu.impl().blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                    narrow(k_out, "k_out"), narrow(m, "m"), narrow(inner, "inner"), &alpha, b, narrow(ldb, "ldb"), a,
                    narrow(lda, "lda"), &beta, c, narrow(ldc, "ldc")),
        "cublasSgemm");
}

void matmul_forward(Gpu& gpu, float* out, const float* inp, const float* weight, const float* bias,
                    std::int64_t n, std::int64_t in_dim, std::int64_t out_dim, WeightLayout layout) {
  // With a bias, each output row starts as the bias and the GEMM adds onto it (as on the CPU).
  if (bias != nullptr) scale_or_init(gpu, out, n, out_dim, out_dim, 0.0f, bias);
  const float beta = bias != nullptr ? 1.0f : 0.0f;
  if (bias != nullptr && in_dim == 0) return;
  const bool out_in = layout == WeightLayout::kOutIn;
  gemm(gpu, false, out_in, n, out_dim, in_dim, 1.0f, inp, in_dim, weight, out_in ? in_dim : out_dim, beta, out,
       out_dim);
}

void matmul_backward(Gpu& gpu, float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, std::int64_t n, std::int64_t in_dim, std::int64_t out_dim,
                     WeightLayout layout, BackwardInto into) {
  const bool out_in = layout == WeightLayout::kOutIn;
  const auto beta = [](Into mode) { return mode == Into::kAdd ? 1.0f : 0.0f; };
  if (dinp != nullptr)  // dinp[n, in] += dout[n, out] · Wᵀ
    gemm(gpu, false, !out_in, n, in_dim, out_dim, 1.0f, dout, out_dim, weight, out_in ? in_dim : out_dim,
         beta(into.dinp), dinp, in_dim);
  if (dweight != nullptr) {
    if (out_in)  // dW[out, in] += doutᵀ · inp
      gemm(gpu, true, false, out_dim, in_dim, n, 1.0f, dout, out_dim, inp, in_dim, beta(into.dweight), dweight,
           in_dim);
    else  // dW[in, out] += inpᵀ · dout
      gemm(gpu, true, false, in_dim, out_dim, n, 1.0f, inp, in_dim, dout, out_dim, beta(into.dweight), dweight,
           out_dim);
  }
  if (dbias != nullptr) bias_backward(gpu, dbias, dout, n, out_dim);
}

void bias_backward(Gpu& gpu, float* dbias, const float* dout, std::int64_t n, std::int64_t dim) {
  if (dim == 0) return;
  bias_backward_kernel<<<blocks_for(dim, 128), 128, 0, gpu.impl().stream>>>(dbias, dout, n, dim);
  check_launch("bias_backward");
}

}  // namespace ntp::tensor::cuda
