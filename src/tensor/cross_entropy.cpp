#include "tensor/cross_entropy.h"

#include <algorithm>
#include <cmath>

#include "tensor/gpu.h"
#include "tensor/simd/loops.h"

namespace ntp::tensor {

namespace {

// One row's part of each pass; the passes below run them over all rows, and
// crossentropy_local runs all three on one row while it is in cache.
float row_max(const float* row, const LogitShape& shape) { return simd::loops().max(row, shape.valid); }

void row_sums(float* sums, float* row, std::int64_t i, std::int64_t target_col, float max,
              const LogitShape& shape) {
  sums[shape.rows + i] = target_col >= 0 ? row[target_col] : 0.0f;
  // The exponentials are kept: finish() needs no second exp.
  sums[i] = simd::loops().exp_shifted_sum(row, max, shape.valid);
}

void row_finish(float* losses, float* row, std::int64_t i, std::int64_t target_col, float max,
                const float* sums, float dloss_scale, const LogitShape& shape, Bf16* rounded) {
  const float inv_sum = 1.0f / sums[i];
  losses[i] = std::log(sums[i]) + max - sums[shape.rows + i];
  const float scale = inv_sum * dloss_scale;
  simd::loops().scale(row, scale, shape.valid);
  std::fill(row + shape.valid, row + shape.cols, 0.0f);
  if (target_col >= 0) row[target_col] -= dloss_scale;
  if (rounded != nullptr) simd::loops().round_bf16(rounded + i * shape.cols, row, shape.cols);
}

template <typename RowFn>
void for_each_row(Context& ctx, const LogitShape& shape, RowFn&& fn) {
  ctx.pool().parallel_for(shape.rows, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) fn(i);
  });
}

}  // namespace

void crossentropy_local_max(Context& ctx, float* row_max_out, const float* logits,
                            const LogitShape& shape) {
  NTP_ON_GPU(ctx, crossentropy_local_max, row_max_out, logits, shape);
  for_each_row(ctx, shape, [&](std::int64_t i) { row_max_out[i] = row_max(logits + i * shape.cols, shape); });
}

void crossentropy_local_sums(Context& ctx, float* sums, float* logits,
                             const std::int64_t* target_col, const float* row_max_in,
                             const LogitShape& shape) {
  NTP_ON_GPU(ctx, crossentropy_local_sums, sums, logits, target_col, row_max_in, shape);
  for_each_row(ctx, shape, [&](std::int64_t i) {
    row_sums(sums, logits + i * shape.cols, i, target_col[i], row_max_in[i], shape);
  });
}

void crossentropy_finish(Context& ctx, float* losses, float* logits,
                         const std::int64_t* target_col, const float* row_max_in, const float* sums,
                         float dloss_scale, const LogitShape& shape, Bf16* rounded) {
  NTP_ON_GPU(ctx, crossentropy_finish, losses, logits, target_col, row_max_in, sums, dloss_scale, shape);
  for_each_row(ctx, shape, [&](std::int64_t i) {
    row_finish(losses, logits + i * shape.cols, i, target_col[i], row_max_in[i], sums, dloss_scale, shape, rounded);
  });
}

void crossentropy_local(Context& ctx, float* losses, float* logits, const std::int64_t* target_col,
                        float* scratch, float dloss_scale, const LogitShape& shape, Bf16* rounded) {
  NTP_ON_GPU(ctx, crossentropy_local, losses, logits, target_col, scratch, dloss_scale, shape);
  float* sums = scratch;  // [sum_exp | target_logit], as the passes lay them out
  for_each_row(ctx, shape, [&](std::int64_t i) {
    float* row = logits + i * shape.cols;
    const float max = row_max(row, shape);
    row_sums(sums, row, i, target_col[i], max, shape);
    row_finish(losses, row, i, target_col[i], max, sums, dloss_scale, shape, rounded);
  });
}

}  // namespace ntp::tensor
