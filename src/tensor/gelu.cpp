#include "tensor/gelu.h"

#include <algorithm>

#include "tensor/gpu.h"
#include "tensor/simd/loops.h"

namespace ntp::tensor {

namespace {
constexpr std::int64_t kGrain = 1 << 14;
constexpr std::int64_t kPrefetchBlock = 1024;  // 4 KiB
}  // namespace

void gelu_forward(Context& ctx, float* out, const float* inp, std::int64_t count) {
  NTP_ON_GPU(ctx, gelu_forward, out, inp, count);
  ctx.pool().parallel_for(count, kGrain, [&](std::int64_t begin, std::int64_t end) {
    simd::loops().gelu_forward(out + begin, inp + begin, end - begin);
  });
}

void gelu_backward(Context& ctx, float* d, const float* inp, std::int64_t count) {
  NTP_ON_GPU(ctx, gelu_backward, d, inp, count);
  // The pre-activations come from the forward pass, long out of cache: each
  // block's successor is prefetched while the block is computed (the loop is
  // elementwise, so blocking keeps the bits).
  ctx.pool().parallel_for(count, kGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t at = begin; at < end; at += kPrefetchBlock) {
      const std::int64_t next = std::min(end, at + kPrefetchBlock);
      for (std::int64_t j = next; j < std::min(end, next + kPrefetchBlock); j += 16) __builtin_prefetch(inp + j);
      simd::loops().gelu_backward(d + at, inp + at, next - at);
    }
  });
}

}  // namespace ntp::tensor
