#include "tensor/adamw.h"

#include <cmath>
#include <map>
#include <mutex>

#include "tensor/simd/loops.h"

namespace ntp::tensor {

namespace {

constexpr std::int64_t kGrain = 1 << 15;

}  // namespace

void adamw_update(Context& ctx, float* param, const float* grad, float* m, float* v,
                  std::int64_t count, const AdamWStep& s) {
  const float c1 = 1.0f / (1.0f - static_cast<float>(std::pow(s.beta1, s.step)));
  const float c2 = 1.0f / (1.0f - static_cast<float>(std::pow(s.beta2, s.step)));
  ctx.pool().parallel_for(count, kGrain, [&](std::int64_t begin, std::int64_t end) {
    simd::loops().adamw(param + begin, grad + begin, m + begin, v + begin, end - begin, s, c1, c2);
  });
}

double sum_squares_serial(const float* x, std::int64_t count) {
  return simd::loops().sum_squares(x, count);
}

double sum_squares(Context& ctx, const float* x, std::int64_t count) {
  // Partial sums keyed by chunk start and added in order: the result does not
  // depend on which thread finishes first.
  std::map<std::int64_t, double> partial;
  std::mutex mutex;
  ctx.pool().parallel_for(count, kGrain, [&](std::int64_t begin, std::int64_t end) {
    const double acc = simd::loops().sum_squares(x + begin, end - begin);
    std::lock_guard lock(mutex);
    partial[begin] = acc;
  });
  double total = 0.0;
  for (const auto& [begin, acc] : partial) total += acc;
  return total;
}

}  // namespace ntp::tensor
