#include "tensor/cross_entropy.h"

#include <algorithm>
#include <cmath>

#include "tensor/simd/loops.h"

namespace ntp::tensor {

void crossentropy_local_max(Context& ctx, float* row_max, const float* logits,
                            const LogitShape& shape) {
  ctx.pool().parallel_for(shape.rows, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const float* row = logits + i * shape.cols;
      row_max[i] = simd::loops().max(row, shape.valid);
    }
  });
}

void crossentropy_local_sums(Context& ctx, float* sums, float* logits,
                             const std::int64_t* target_col, const float* row_max,
                             const LogitShape& shape) {
  ctx.pool().parallel_for(shape.rows, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      float* row = logits + i * shape.cols;
      sums[shape.rows + i] = target_col[i] >= 0 ? row[target_col[i]] : 0.0f;
      // The exponentials are kept: finish() needs no second exp.
      sums[i] = simd::loops().exp_shifted_sum(row, row_max[i], shape.valid);
    }
  });
}

void crossentropy_finish(Context& ctx, float* losses, float* logits,
                         const std::int64_t* target_col, const float* row_max, const float* sums,
                         float dloss_scale, const LogitShape& shape) {
  ctx.pool().parallel_for(shape.rows, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      float* row = logits + i * shape.cols;
      const float inv_sum = 1.0f / sums[i];
      losses[i] = std::log(sums[i]) + row_max[i] - sums[shape.rows + i];
      const float scale = inv_sum * dloss_scale;
      simd::loops().scale(row, scale, shape.valid);
      std::fill(row + shape.valid, row + shape.cols, 0.0f);
      if (target_col[i] >= 0) row[target_col[i]] -= dloss_scale;
    }
  });
}

}  // namespace ntp::tensor
