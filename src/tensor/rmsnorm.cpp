#include "tensor/rmsnorm.h"

#include <cmath>

#include "tensor/gpu.h"
#include "tensor/simd/loops.h"

namespace ntp::tensor {

namespace {
constexpr std::int64_t kRowGrain = 16;
constexpr std::int64_t kColumnGrain = 64;
}  // namespace

void rmsnorm_forward(Context& ctx, float* out, float* rstd, const float* inp, const float* weight,
                     std::int64_t n, std::int64_t dim, float eps) {
  NTP_ON_GPU(ctx, rmsnorm_forward, out, rstd, inp, weight, n, dim, eps);
  const simd::Loops& loops = simd::loops();
  ctx.pool().parallel_for(n, kRowGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) rstd[i] = loops.rmsnorm_row(out + i * dim, inp + i * dim, weight, eps, dim);
  });
}

void rmsnorm_backward(Context& ctx, float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, std::int64_t n, std::int64_t dim) {
  NTP_ON_GPU(ctx, rmsnorm_backward, dinp, dweight, dout, inp, weight, rstd, n, dim);
  const simd::Loops& loops = simd::loops();
  ctx.pool().parallel_for(n, kRowGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i)
      loops.rmsnorm_backward_row(dinp + i * dim, dout + i * dim, inp + i * dim, weight, rstd[i], dim);
  });
  // Weight gradient split by column: the row order of each sum (hence the
  // result) does not depend on the thread count.
  ctx.pool().parallel_for(dim, kColumnGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = 0; i < n; ++i)
      loops.scaled_product_add(dweight + begin, inp + i * dim + begin, rstd[i], dout + i * dim + begin, end - begin);
  });
}

namespace reference {

void rmsnorm_forward(Context& ctx, float* out, float* rstd, const float* inp, const float* weight,
                     std::int64_t n, std::int64_t dim, float eps) {
  ctx.pool().parallel_for(n, kRowGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const float* x = inp + i * dim;
      const float mean_sq = simd::loops().dot(x, x, dim) / static_cast<float>(dim);
      const float s = 1.0f / std::sqrt(mean_sq + eps);
      float* y = out + i * dim;
      for (std::int64_t j = 0; j < dim; ++j) y[j] = x[j] * s * weight[j];
      rstd[i] = s;
    }
  });
}

void rmsnorm_backward(Context& ctx, float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, std::int64_t n, std::int64_t dim) {
  // Input gradient, rows independent: with xhat = x * s and dnorm = w * dy,
  // dx = s * (dnorm - xhat * mean(dnorm * xhat)).
  ctx.pool().parallel_for(n, kRowGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const float* x = inp + i * dim;
      const float* dy = dout + i * dim;
      const float s = rstd[i];
      float dnorm_norm_mean = 0.0f;
      for (std::int64_t j = 0; j < dim; ++j) dnorm_norm_mean += weight[j] * dy[j] * x[j] * s;
      dnorm_norm_mean /= static_cast<float>(dim);
      float* dx = dinp + i * dim;
      for (std::int64_t j = 0; j < dim; ++j)
        dx[j] += (weight[j] * dy[j] - x[j] * s * dnorm_norm_mean) * s;
    }
  });
  ctx.pool().parallel_for(dim, kColumnGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = 0; i < n; ++i) {
      const float* x = inp + i * dim;
      const float* dy = dout + i * dim;
      for (std::int64_t j = begin; j < end; ++j) dweight[j] += x[j] * rstd[i] * dy[j];
    }
  });
}

}  // namespace reference

}  // namespace ntp::tensor
