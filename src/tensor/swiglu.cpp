#include "tensor/swiglu.h"

#include "tensor/gpu.h"
#include "tensor/simd/loops.h"

namespace ntp::tensor {

namespace {
constexpr std::int64_t kGrain = 1 << 13;
}  // namespace

void swiglu_forward(Context& ctx, float* out, const float* gate_up, std::int64_t count) {
  NTP_ON_GPU(ctx, swiglu_forward, out, gate_up, count);
  ctx.pool().parallel_for(count, kGrain, [&](std::int64_t begin, std::int64_t end) {
    simd::loops().swiglu_forward(out + begin, gate_up + 2 * begin, end - begin);
  });
}

void swiglu_backward(Context& ctx, float* dgate_up, const float* gate_up, const float* dout,
                     std::int64_t count) {
  NTP_ON_GPU(ctx, swiglu_backward, dgate_up, gate_up, dout, count);
  ctx.pool().parallel_for(count, kGrain, [&](std::int64_t begin, std::int64_t end) {
    simd::loops().swiglu_backward(dgate_up + 2 * begin, gate_up + 2 * begin, dout + begin, end - begin);
  });
}

}  // namespace ntp::tensor
