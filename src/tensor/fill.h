#pragma once
// Clearing a scratch buffer over the pool: a buffer that a kernel accumulates
// into (the attention's dqkv, SwiGLU's gradient) is cleared every layer, and
// one thread's memset left the other core idle.
#include <cstdint>

#include "tensor/context.h"

namespace ntp::tensor {

void zero(Context& ctx, float* x, std::int64_t count);

// Copies between host memory and the memory the context's kernels use (the
// same memory on the CPU, where this is a memcpy; the GPU's on a GPU, where the
// copy waits for the kernels queued before it).
void copy_from_host(Context& ctx, float* dst, const float* host_src, std::int64_t count);
void copy_to_host(Context& ctx, float* host_dst, const float* src, std::int64_t count);

}  // namespace ntp::tensor
