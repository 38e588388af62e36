#include "tensor/layernorm.h"

#include <cmath>

#include "tensor/gpu.h"
#include "tensor/simd/loops.h"

namespace ntp::tensor {

namespace {
constexpr float kEps = 1e-5f;
constexpr std::int64_t kRowGrain = 16;
constexpr std::int64_t kColumnGrain = 64;
}  // namespace

void layernorm_forward(Context& ctx, float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, std::int64_t n, std::int64_t dim) {
  NTP_ON_GPU(ctx, layernorm_forward, out, mean, rstd, inp, weight, bias, n, dim);
  ctx.pool().parallel_for(n, kRowGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const float* x = inp + i * dim;
      const float m = simd::loops().sum(x, dim) / static_cast<float>(dim);
      const float var = simd::loops().centered_sum_squares(x, m, dim) / static_cast<float>(dim);
      const float s = 1.0f / std::sqrt(var + kEps);
      float* y = out + i * dim;
      for (std::int64_t j = 0; j < dim; ++j) y[j] = (x[j] - m) * s * weight[j] + bias[j];
      mean[i] = m;
      rstd[i] = s;
    }
  });
}

void layernorm_backward(Context& ctx, float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, std::int64_t n, std::int64_t dim) {
  NTP_ON_GPU(ctx, layernorm_backward, dinp, dweight, dbias, dout, inp, weight, mean, rstd, n, dim);
  const simd::Loops& loops = simd::loops();
  ctx.pool().parallel_for(n, kRowGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i)
      loops.layernorm_backward_row(dinp + i * dim, dout + i * dim, inp + i * dim, weight, mean[i], rstd[i], dim);
  });
  // Parameter gradients split by column: the row order of each sum (hence the
  // result) does not depend on the thread count.
  ctx.pool().parallel_for(dim, kColumnGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = 0; i < n; ++i)
      loops.layernorm_param_grads_row(dweight + begin, dbias + begin, dout + i * dim + begin,
                                      inp + i * dim + begin, mean[i], rstd[i], end - begin);
  });
}

namespace reference {

void layernorm_backward(Context& ctx, float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, std::int64_t n, std::int64_t dim) {
  // Input gradient: rows are independent.
  ctx.pool().parallel_for(n, kRowGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const float* x = inp + i * dim;
      const float* dy = dout + i * dim;
      float dnorm_mean = 0.0f;
      float dnorm_norm_mean = 0.0f;
      for (std::int64_t j = 0; j < dim; ++j) {
        const float xhat = (x[j] - mean[i]) * rstd[i];
        const float dnorm = weight[j] * dy[j];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * xhat;
      }
      dnorm_mean /= static_cast<float>(dim);
      dnorm_norm_mean /= static_cast<float>(dim);
      float* dx = dinp + i * dim;
      for (std::int64_t j = 0; j < dim; ++j) {
        const float xhat = (x[j] - mean[i]) * rstd[i];
        const float dnorm = weight[j] * dy[j];
        dx[j] += (dnorm - dnorm_mean - xhat * dnorm_norm_mean) * rstd[i];
      }
    }
  });
  // Parameter gradients: split by column so threads never share an output and
  // the row order of the sum (hence the result) does not depend on the thread count.
  ctx.pool().parallel_for(dim, kColumnGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = 0; i < n; ++i) {
      const float* x = inp + i * dim;
      const float* dy = dout + i * dim;
      for (std::int64_t j = begin; j < end; ++j) {
        dbias[j] += dy[j];
        dweight[j] += (x[j] - mean[i]) * rstd[i] * dy[j];
      }
    }
  });
}

}  // namespace reference

}  // namespace ntp::tensor
