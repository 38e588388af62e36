#include "tensor/swiglu.h"

#include <cmath>

namespace ntp::tensor {

namespace {
constexpr std::int64_t kGrain = 1 << 13;
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
}  // namespace

void swiglu_forward(Context& ctx, float* out, const float* gate_up, std::int64_t count) {
  ctx.pool().parallel_for(count, kGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const float g = gate_up[2 * i], u = gate_up[2 * i + 1];
      out[i] = g * sigmoid(g) * u;
    }
  });
}

void swiglu_backward(Context& ctx, float* dgate_up, const float* gate_up, const float* dout,
                     std::int64_t count) {
  // d/dg [g s(g)] = s (1 + g (1 - s)).
  ctx.pool().parallel_for(count, kGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const float g = gate_up[2 * i], u = gate_up[2 * i + 1];
      const float s = sigmoid(g);
      dgate_up[2 * i] += dout[i] * u * s * (1.0f + g * (1.0f - s));
      dgate_up[2 * i + 1] += dout[i] * g * s;
    }
  });
}

}  // namespace ntp::tensor
