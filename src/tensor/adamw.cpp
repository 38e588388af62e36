#include "tensor/adamw.h"

#include <cmath>
#include <map>
#include <mutex>

namespace ntp::tensor {

namespace {
constexpr std::int64_t kGrain = 1 << 15;
}

void adamw_update(Context& ctx, float* param, const float* grad, float* m, float* v,
                  std::int64_t count, const AdamWStep& s) {
  const float c1 = 1.0f / (1.0f - static_cast<float>(std::pow(s.beta1, s.step)));
  const float c2 = 1.0f / (1.0f - static_cast<float>(std::pow(s.beta2, s.step)));
  ctx.pool().parallel_for(count, kGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const float g = grad[i] * s.grad_scale;
      const float mi = s.beta1 * m[i] + (1.0f - s.beta1) * g;
      const float vi = s.beta2 * v[i] + (1.0f - s.beta2) * g * g;
      m[i] = mi;
      v[i] = vi;
      param[i] -= s.lr * (mi * c1 / (std::sqrt(vi * c2) + s.eps) + s.weight_decay * param[i]);
    }
  });
}

double sum_squares(Context& ctx, const float* x, std::int64_t count) {
  // Partial sums keyed by chunk start and added in order: the result does not
  // depend on which thread finishes first.
  std::map<std::int64_t, double> partial;
  std::mutex mutex;
  ctx.pool().parallel_for(count, kGrain, [&](std::int64_t begin, std::int64_t end) {
    double acc = 0.0;
    for (std::int64_t i = begin; i < end; ++i) acc += static_cast<double>(x[i]) * x[i];
    std::lock_guard lock(mutex);
    partial[begin] = acc;
  });
  double total = 0.0;
  for (const auto& [begin, acc] : partial) total += acc;
  return total;
}

}  // namespace ntp::tensor
