#pragma once
// Clearing a scratch buffer over the pool: a buffer that a kernel accumulates
// into (the attention's dqkv, SwiGLU's gradient) is cleared every layer, and
// one thread's memset left the other core idle.
#include <cstdint>

#include "tensor/context.h"

namespace ntp::tensor {

void zero(Context& ctx, float* x, std::int64_t count);

}  // namespace ntp::tensor
