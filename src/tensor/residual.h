#pragma once
// The residual stream: out = residual + x + bias (bias of the row-parallel
// layer, added once after the TP all-reduce of x; null for none).
#include <cstdint>

#include "tensor/context.h"

namespace ntp::tensor {

void residual_forward(Context& ctx, float* out, const float* residual, const float* x,
                      const float* bias, std::int64_t n, std::int64_t dim);

}  // namespace ntp::tensor
