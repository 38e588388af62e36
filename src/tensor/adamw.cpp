#include "tensor/adamw.h"

#include <cmath>
#include <map>
#include <mutex>

namespace ntp::tensor {

namespace {

constexpr std::int64_t kGrain = 1 << 15;

// The loop bodies as plain functions over restrict pointers, so that they vectorise.
void adamw_range(float* __restrict param, const float* __restrict grad, float* __restrict m,
                 float* __restrict v, std::int64_t count, const AdamWStep& s, float c1, float c2) {
  const float beta1 = s.beta1, beta2 = s.beta2, lr = s.lr, eps = s.eps;
  const float wd = s.weight_decay, scale = s.grad_scale;
  for (std::int64_t i = 0; i < count; ++i) {
    const float g = grad[i] * scale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] -= lr * (mi * c1 / (std::sqrt(vi * c2) + eps) + wd * param[i]);
  }
}

// Eight interleaved double accumulators, added in a fixed order at the end:
// vectorises, and the result depends only on the input.
double sum_squares_range(const float* __restrict x, std::int64_t count) {
  constexpr int kLanes = 8;
  double lane[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= count; i += kLanes)
    for (int k = 0; k < kLanes; ++k) lane[k] += static_cast<double>(x[i + k]) * x[i + k];
  double total = 0.0;
  for (; i < count; ++i) total += static_cast<double>(x[i]) * x[i];
  for (double l : lane) total += l;
  return total;
}

}  // namespace

void adamw_update(Context& ctx, float* param, const float* grad, float* m, float* v,
                  std::int64_t count, const AdamWStep& s) {
  const float c1 = 1.0f / (1.0f - static_cast<float>(std::pow(s.beta1, s.step)));
  const float c2 = 1.0f / (1.0f - static_cast<float>(std::pow(s.beta2, s.step)));
  ctx.pool().parallel_for(count, kGrain, [&](std::int64_t begin, std::int64_t end) {
    adamw_range(param + begin, grad + begin, m + begin, v + begin, end - begin, s, c1, c2);
  });
}

double sum_squares_serial(const float* x, std::int64_t count) { return sum_squares_range(x, count); }

double sum_squares(Context& ctx, const float* x, std::int64_t count) {
  // Partial sums keyed by chunk start and added in order: the result does not
  // depend on which thread finishes first.
  std::map<std::int64_t, double> partial;
  std::mutex mutex;
  ctx.pool().parallel_for(count, kGrain, [&](std::int64_t begin, std::int64_t end) {
    const double acc = sum_squares_range(x + begin, end - begin);
    std::lock_guard lock(mutex);
    partial[begin] = acc;
  });
  double total = 0.0;
  for (const auto& [begin, acc] : partial) total += acc;
  return total;
}

}  // namespace ntp::tensor
