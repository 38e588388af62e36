#pragma once
// LayerNorm over the last dimension (eps 1e-5, as GPT-2). Forward keeps the
// per-row mean and reciprocal standard deviation for the backward pass.
#include <cstdint>

#include "tensor/context.h"

namespace ntp::tensor {

void layernorm_forward(Context& ctx, float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, std::int64_t n, std::int64_t dim);

// dinp += ..., dweight += ..., dbias += ... (accumulating, like every backward kernel).
void layernorm_backward(Context& ctx, float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, std::int64_t n, std::int64_t dim);

}  // namespace ntp::tensor
