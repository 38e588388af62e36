#pragma once
// The embedding's row kernels, for the vocabulary-parallel embedding of
// model/vocab_parallel.h: a rank looks up the token rows it holds (column -1:
// another rank holds the row, the output row is 0 and the TP all-reduce
// fills it), adds learned positions, and in backward adds each position's
// gradient into its row. The sums run in position order on every backend, so
// the CPU and the GPU give the same bits.
#include <cstdint>

#include "tensor/context.h"

namespace ntp::tensor {

// out[i] = rows[cols[i]] (a row of `dim`), or 0 where cols[i] < 0.
void embedding_gather(Context& ctx, float* out, const std::int64_t* cols, const float* rows, std::int64_t n,
                      std::int64_t dim);
// out[i] += wpe[i % seq].
void embedding_add_positions(Context& ctx, float* out, const float* wpe, std::int64_t n, std::int64_t seq,
                             std::int64_t dim);
// dwpe[t] += dout[i] for every i with i % seq == t, in increasing i.
void embedding_positions_backward(Context& ctx, float* dwpe, const float* dout, std::int64_t n, std::int64_t seq,
                                  std::int64_t dim);
// For each group g: drows[row[g]] += dout[p] for p in positions[start[g] ..
// start[g + 1]), in that order (a grouping of the positions by the row they
// feed, each group in position order: RowGroups below).
void embedding_rows_backward(Context& ctx, float* drows, const std::int64_t* row, const std::int64_t* start,
                             const std::int64_t* positions, std::int64_t groups, const float* dout,
                             std::int64_t dim);

}  // namespace ntp::tensor
