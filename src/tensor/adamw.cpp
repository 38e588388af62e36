#include "tensor/adamw.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tensor/gpu.h"
#include "tensor/simd/loops.h"

namespace ntp::tensor {

namespace {

constexpr std::int64_t kGrain = 1 << 15;

}  // namespace

void adamw_update(Context& ctx, float* param, const float* grad, float* m, float* v,
                  std::int64_t count, const AdamWStep& s) {
  NTP_ON_GPU(ctx, adamw_update, param, grad, m, v, count, s);
  adamw_update(ctx, param, grad, m, v, {{0, count, s.weight_decay}}, s);
}

void adamw_update(Context& ctx, float* param, const float* grad, float* m, float* v,
                  const std::vector<AdamWSegment>& segments, const AdamWStep& step, Bf16* rounded) {
  const float c1 = 1.0f / (1.0f - static_cast<float>(std::pow(step.beta1, step.step)));
  const float c2 = 1.0f / (1.0f - static_cast<float>(std::pow(step.beta2, step.step)));
  // Element k of the pass is element k of the segments laid end to end.
  std::vector<std::int64_t> starts(segments.size() + 1, 0);
  for (std::size_t i = 0; i < segments.size(); ++i) starts[i + 1] = starts[i] + segments[i].count;
  ctx.pool().parallel_for(starts.back(), kGrain, [&](std::int64_t begin, std::int64_t end) {
    auto i = static_cast<std::size_t>(std::upper_bound(starts.begin(), starts.end(), begin) - starts.begin() - 1);
    for (; i < segments.size() && starts[i] < end; ++i) {
      const std::int64_t from = std::max(begin, starts[i]), to = std::min(end, starts[i + 1]);
      if (from >= to) continue;
      const std::int64_t at = segments[i].offset + (from - starts[i]);
      AdamWStep s = step;
      s.weight_decay = segments[i].weight_decay;
      simd::loops().adamw(param + at, grad + at, m + at, v + at, rounded != nullptr ? rounded + at : nullptr,
                          to - from, s, c1, c2);
    }
  });
}

double sum_squares_serial(const float* x, std::int64_t count) {
  return simd::loops().sum_squares(x, count);
}

void sum_squares_pieces(Context& ctx, const float* x, std::int64_t count, std::int64_t piece, double* out) {
  if (count <= 0) return;
  const std::int64_t pieces = (count + piece - 1) / piece;
  const simd::Loops& loops = simd::loops();
  const auto one = [&](std::int64_t p) {
    out[p] = loops.sum_squares(x + p * piece, std::min(piece, count - p * piece));
  };
  // A thread's pieces in four quarters, one piece of each read side by side;
  // a parallel chunk holds kGrain elements at least.
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain / piece);
  ctx.pool().parallel_for(pieces, grain, [&](std::int64_t begin, std::int64_t end) {
    const std::int64_t full_end = std::min(end, count / piece);  // pieces of full length
    const std::int64_t quarter = (full_end - begin) / 4;
    for (std::int64_t k = 0; k < quarter; ++k) {
      const std::int64_t p[4] = {begin + k, begin + quarter + k, begin + 2 * quarter + k, begin + 3 * quarter + k};
      const float* at[4] = {x + p[0] * piece, x + p[1] * piece, x + p[2] * piece, x + p[3] * piece};
      double sums[4];
      loops.sum_squares_x4(at, piece, sums);
      for (int a = 0; a < 4; ++a) out[p[a]] = sums[a];
    }
    for (std::int64_t p = begin + 4 * quarter; p < end; ++p) one(p);
  });
}

double sum_squares(Context& ctx, const float* x, std::int64_t count) {
  // Fixed pieces added in order: the result does not depend on the thread count.
  std::vector<double> piece_sums(static_cast<std::size_t>((count + kGrain - 1) / kGrain));
  sum_squares_pieces(ctx, x, count, kGrain, piece_sums.data());
  double total = 0.0;
  for (double s : piece_sums) total += s;
  return total;
}

}  // namespace ntp::tensor
