#include "tensor/gelu.h"

#include <cmath>

#include "tensor/fast_math.h"

namespace ntp::tensor {

namespace {
const float kScale = std::sqrt(2.0f / static_cast<float>(M_PI));
constexpr std::int64_t kGrain = 1 << 14;
}  // namespace

void gelu_forward(Context& ctx, float* out, const float* inp, std::int64_t count) {
  ctx.pool().parallel_for(count, kGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const float x = inp[i];
      const float cube = 0.044715f * x * x * x;
      out[i] = 0.5f * x * (1.0f + fast_tanh(kScale * (x + cube)));
    }
  });
}

void gelu_backward(Context& ctx, float* dinp, const float* inp, const float* dout,
                   std::int64_t count) {
  ctx.pool().parallel_for(count, kGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const float x = inp[i];
      const float cube = 0.044715f * x * x * x;
      const float t = fast_tanh(kScale * (x + cube));
      const float sech2 = 1.0f - t * t;
      const float local = 0.5f * (1.0f + t) + 0.5f * x * sech2 * kScale * (1.0f + 3.0f * 0.044715f * x * x);
      dinp[i] += local * dout[i];
    }
  });
}

}  // namespace ntp::tensor
