#include "tensor/residual.h"

#include "tensor/gpu.h"

namespace ntp::tensor {

void residual_forward(Context& ctx, float* out, const float* residual, const float* x,
                      const float* bias, std::int64_t n, std::int64_t dim) {
  NTP_ON_GPU(ctx, residual_forward, out, residual, x, bias, n, dim);
  ctx.pool().parallel_for(n, 16, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const std::int64_t row = i * dim;
      if (bias == nullptr) {
        for (std::int64_t j = 0; j < dim; ++j) out[row + j] = residual[row + j] + x[row + j];
      } else {
        for (std::int64_t j = 0; j < dim; ++j) out[row + j] = residual[row + j] + x[row + j] + bias[j];
      }
    }
  });
}

}  // namespace ntp::tensor
