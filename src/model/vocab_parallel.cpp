#include "model/vocab_parallel.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "tensor/embedding.h"
#include "tensor/fill.h"

namespace ntp::model {

std::vector<std::int64_t> local_columns(const layout::IntervalSet& rows, const std::int32_t* ids,
                                        std::int64_t count, std::int64_t vocab, const char* what) {
  std::vector<std::int64_t> cols(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab)
      throw std::invalid_argument(std::string("batch ") + what + "[" + std::to_string(i) +
                                  "] = " + std::to_string(ids[i]) + " outside vocabulary [0," +
                                  std::to_string(vocab) + ")");
    cols[static_cast<std::size_t>(i)] = rows.offset_of(ids[i]);
  }
  return cols;
}

RowGroups row_groups(const std::vector<std::int64_t>& token_col) {
  RowGroups g;
  for (std::size_t i = 0; i < token_col.size(); ++i)
    if (token_col[i] >= 0) g.positions.push_back(static_cast<std::int64_t>(i));
  std::stable_sort(g.positions.begin(), g.positions.end(),
                   [&](std::int64_t a, std::int64_t b) { return token_col[static_cast<std::size_t>(a)] < token_col[static_cast<std::size_t>(b)]; });
  for (std::size_t k = 0; k < g.positions.size(); ++k) {
    const std::int64_t col = token_col[static_cast<std::size_t>(g.positions[k])];
    if (g.row.empty() || g.row.back() != col) {
      g.slot.push_back(static_cast<std::int64_t>(g.row.size()));
      g.row.push_back(col);
      g.start.push_back(static_cast<std::int64_t>(k));
    }
  }
  g.start.push_back(static_cast<std::int64_t>(g.positions.size()));
  return g;
}

void embedding_forward(tensor::Context& ctx, float* out, const std::int64_t* cols, std::int64_t n,
                       const float* wte, const float* wpe, std::int64_t seq, std::int64_t dim,
                       const KernelAllReduce& reduce) {
  tensor::embedding_gather(ctx, out, cols, wte, n, dim);
  // Exactly one rank holds each row, so the sum is exact (x + 0 = x).
  if (reduce) reduce(out, static_cast<std::size_t>(n * dim), comm::ReduceOp::kSum);
  if (wpe != nullptr) tensor::embedding_add_positions(ctx, out, wpe, n, seq, dim);
}

void embedding_backward(tensor::Context& ctx, float* dwte, float* dwpe, const RowGroupsView& groups,
                        const float* dout, std::int64_t n, std::int64_t seq, std::int64_t dim) {
  if (dwpe != nullptr) tensor::embedding_positions_backward(ctx, dwpe, dout, n, seq, dim);
  tensor::embedding_rows_backward(ctx, dwte, groups.row, groups.start, groups.positions, groups.groups, dout, dim);
}

void embedding_backward_rows(tensor::Context& ctx, EmbeddingRows& rows, float* dwpe, const RowGroups& host_groups,
                             const RowGroupsView& groups, float* scratch, const float* dout, std::int64_t n,
                             std::int64_t seq, std::int64_t dim) {
  if (dwpe != nullptr) tensor::embedding_positions_backward(ctx, dwpe, dout, n, seq, dim);
  rows.dim = dim;
  rows.cols = host_groups.row;
  rows.values.assign(rows.cols.size() * static_cast<std::size_t>(dim), 0.0f);
  const std::int64_t count = groups.groups * dim;
  tensor::zero(ctx, scratch, count);
  tensor::embedding_rows_backward(ctx, scratch, groups.slot, groups.start, groups.positions, groups.groups, dout, dim);
  tensor::copy_to_host(ctx, rows.values.data(), scratch, count);
}

namespace {
void check_target_holders(const float* holders, std::size_t rows) {
  for (std::size_t i = 0; i < rows; ++i)
    if (holders[i] != 1.0f)
      throw std::runtime_error("vocab-parallel cross-entropy: targets[" + std::to_string(i) +
                               "] is held by " + std::to_string(static_cast<int>(holders[i])) +
                               " ranks of the TP group; the vocabulary shards must partition "
                               "[0, padded_vocab)");
}
}  // namespace

void vocab_parallel_cross_entropy(tensor::Context& ctx, float* losses, float* logits,
                                  const std::vector<std::int64_t>& target_col, const std::int64_t* kernel_cols,
                                  const tensor::LogitShape& shape, float dloss_scale, float* scratch,
                                  const KernelAllReduce& reduce, tensor::Bf16* rounded) {
  const auto rows = static_cast<std::size_t>(shape.rows);
  float* row_max = scratch;
  float* sums = scratch + rows;  // [sum_exp | target_logit | holders]
  std::vector<float> holders(rows);
  for (std::size_t i = 0; i < rows; ++i) holders[i] = target_col[i] >= 0 ? 1.0f : 0.0f;
  if (!reduce) {  // the whole vocabulary here: one pass per row
    check_target_holders(holders.data(), rows);
    tensor::crossentropy_local(ctx, losses, logits, kernel_cols, sums, dloss_scale, shape, rounded);
    return;
  }
  tensor::crossentropy_local_max(ctx, row_max, logits, shape);
  reduce(row_max, rows, comm::ReduceOp::kMax);
  tensor::crossentropy_local_sums(ctx, sums, logits, kernel_cols, row_max, shape);
  // Counting the holders of each target in the same all-reduce costs `rows`
  // floats and turns shards that miss (or repeat) a row from a silently wrong
  // loss into the same error on every rank.
  const auto n = static_cast<std::int64_t>(rows);
  tensor::copy_from_host(ctx, sums + 2 * rows, holders.data(), n);
  reduce(sums, 3 * rows, comm::ReduceOp::kSum);
  tensor::copy_to_host(ctx, holders.data(), sums + 2 * rows, n);
  check_target_holders(holders.data(), rows);
  tensor::crossentropy_finish(ctx, losses, logits, kernel_cols, row_max, sums, dloss_scale, shape, rounded);
}

}  // namespace ntp::model
