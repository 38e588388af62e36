#pragma once
// GELU with the tanh approximation (GPT-2).
#include <cstdint>

#include "tensor/context.h"

namespace ntp::tensor {

void gelu_forward(Context& ctx, float* out, const float* inp, std::int64_t count);
// In place: d holds dL/d(gelu(inp)) and becomes dL/d(inp) = gelu'(inp) d. The
// gradient stays in the buffer the fc2 backward just wrote (in cache) instead
// of going to a cleared one (a memset, then a read-modify-write of 3 MB a layer).
void gelu_backward(Context& ctx, float* d, const float* inp, std::int64_t count);

}  // namespace ntp::tensor
