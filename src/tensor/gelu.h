#pragma once
// GELU with the tanh approximation (GPT-2).
#include <cstdint>

#include "tensor/context.h"

namespace ntp::tensor {

void gelu_forward(Context& ctx, float* out, const float* inp, std::int64_t count);
// dinp = gelu'(inp) * dout (overwrites: the model needs no cleared buffer first)
void gelu_backward(Context& ctx, float* dinp, const float* inp, const float* dout,
                   std::int64_t count);

}  // namespace ntp::tensor
