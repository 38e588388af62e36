#pragma once
// LayerNorm over the last dimension (eps 1e-5, as GPT-2). Forward keeps the
// per-row mean and reciprocal standard deviation for the backward pass.
//
// The backward runs each row through the SIMD loops (simd/loops.h). The plain
// loops it replaced stay in `reference`, what tests/tensor checks it against:
// the parameter gradients give the reference's bits, the input gradient
// differs only by the order of its two row sums (16 lanes instead of one
// chain), within the bound layernorm_test.cpp derives.
#include <cstdint>

#include "tensor/context.h"

namespace ntp::tensor {

void layernorm_forward(Context& ctx, float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, std::int64_t n, std::int64_t dim);

// dinp += ..., dweight += ..., dbias += ... (accumulating, like every backward kernel).
void layernorm_backward(Context& ctx, float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, std::int64_t n, std::int64_t dim);

namespace reference {
void layernorm_backward(Context& ctx, float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, std::int64_t n, std::int64_t dim);
}  // namespace reference

}  // namespace ntp::tensor
