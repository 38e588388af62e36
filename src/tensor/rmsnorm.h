#pragma once
// RMSNorm over the last dimension (Llama): y = x / sqrt(mean(x^2) + eps) * w,
// no mean subtraction, no bias. Forward keeps the per-row reciprocal RMS for
// the backward pass.
//
// The kernels run each row through the SIMD loops (simd/loops.h). The plain
// loops they replaced stay in `reference`, what tests/tensor checks them
// against: the forward and the weight gradient give the reference's bits, the
// input gradient differs only by the order of its row sum (16 lanes instead
// of one chain), within the bound llama_kernels_test.cpp derives.
#include <cstdint>

#include "tensor/context.h"

namespace ntp::tensor {

// out, inp [n, dim]; rstd [n]; weight [dim].
void rmsnorm_forward(Context& ctx, float* out, float* rstd, const float* inp, const float* weight,
                     std::int64_t n, std::int64_t dim, float eps);

// dinp += ..., dweight += ... (accumulating, like every backward kernel).
void rmsnorm_backward(Context& ctx, float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, std::int64_t n, std::int64_t dim);

namespace reference {
void rmsnorm_forward(Context& ctx, float* out, float* rstd, const float* inp, const float* weight,
                     std::int64_t n, std::int64_t dim, float eps);
void rmsnorm_backward(Context& ctx, float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, std::int64_t n, std::int64_t dim);
}  // namespace reference

}  // namespace ntp::tensor
