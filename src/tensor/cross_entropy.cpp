#include "tensor/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tensor/fast_math.h"

namespace ntp::tensor {

void crossentropy_local_max(Context& ctx, float* row_max, const float* logits,
                            const LogitShape& shape) {
  ctx.pool().parallel_for(shape.rows, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const float* row = logits + i * shape.cols;
      float m = -std::numeric_limits<float>::infinity();
      for (std::int64_t j = 0; j < shape.valid; ++j) m = std::max(m, row[j]);
      row_max[i] = m;
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
      float s = 0.0f;
      for (std::int64_t j = 0; j < shape.valid; ++j) {
        row[j] = fast_exp(row[j] - row_max[i]);  // kept: finish() needs no second exp
        s += row[j];
      }
      sums[i] = s;
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
      for (std::int64_t j = 0; j < shape.valid; ++j) row[j] *= scale;
      std::fill(row + shape.valid, row + shape.cols, 0.0f);
      if (target_col[i] >= 0) row[target_col[i]] -= dloss_scale;
    }
  });
}

}  // namespace ntp::tensor
