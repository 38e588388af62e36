#include "tensor/embedding.h"

#include <algorithm>

#include "tensor/gpu.h"

namespace ntp::tensor {

void embedding_gather(Context& ctx, float* out, const std::int64_t* cols, const float* rows, std::int64_t n,
                      std::int64_t dim) {
  NTP_ON_GPU(ctx, embedding_gather, out, cols, rows, n, dim);
  for (std::int64_t i = 0; i < n; ++i) {
    float* row = out + i * dim;
    if (cols[i] >= 0) std::copy_n(rows + cols[i] * dim, dim, row);
    else std::fill_n(row, dim, 0.0f);
  }
}

void embedding_add_positions(Context& ctx, float* out, const float* wpe, std::int64_t n, std::int64_t seq,
                             std::int64_t dim) {
  NTP_ON_GPU(ctx, embedding_add_positions, out, wpe, n, seq, dim);
  ctx.pool().parallel_for(n, 16, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const float* pos = wpe + (i % seq) * dim;
      float* row = out + i * dim;
      for (std::int64_t j = 0; j < dim; ++j) row[j] += pos[j];
    }
  });
}

void embedding_positions_backward(Context& ctx, float* dwpe, const float* dout, std::int64_t n, std::int64_t seq,
                                  std::int64_t dim) {
  NTP_ON_GPU(ctx, embedding_positions_backward, dwpe, dout, n, seq, dim);
  for (std::int64_t i = 0; i < n; ++i) {
    float* pos = dwpe + (i % seq) * dim;
    for (std::int64_t j = 0; j < dim; ++j) pos[j] += dout[i * dim + j];
  }
}

void embedding_rows_backward(Context& ctx, float* drows, const std::int64_t* row, const std::int64_t* start,
                             const std::int64_t* positions, std::int64_t groups, const float* dout,
                             std::int64_t dim) {
  NTP_ON_GPU(ctx, embedding_rows_backward, drows, row, start, positions, groups, dout, dim);
  for (std::int64_t g = 0; g < groups; ++g) {
    float* d = drows + row[g] * dim;
    for (std::int64_t k = start[g]; k < start[g + 1]; ++k)
      for (std::int64_t j = 0; j < dim; ++j) d[j] += dout[positions[k] * dim + j];
  }
}

}  // namespace ntp::tensor
