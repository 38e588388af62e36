#include "tensor/gelu.h"

#include "tensor/simd/loops.h"

namespace ntp::tensor {

namespace {
constexpr std::int64_t kGrain = 1 << 14;
}  // namespace

void gelu_forward(Context& ctx, float* out, const float* inp, std::int64_t count) {
  ctx.pool().parallel_for(count, kGrain, [&](std::int64_t begin, std::int64_t end) {
    simd::loops().gelu_forward(out + begin, inp + begin, end - begin);
  });
}

void gelu_backward(Context& ctx, float* d, const float* inp, std::int64_t count) {
  ctx.pool().parallel_for(count, kGrain, [&](std::int64_t begin, std::int64_t end) {
    simd::loops().gelu_backward(d + begin, inp + begin, end - begin);
  });
}

}  // namespace ntp::tensor
