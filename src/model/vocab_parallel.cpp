#include "model/vocab_parallel.h"

#include <algorithm>
#include <stdexcept>
#include <string>

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

void embedding_forward(tensor::Context& ctx, float* out, const std::vector<std::int64_t>& token_col,
                       const float* wte, const float* wpe, std::int64_t seq, std::int64_t dim,
                       comm::Group* tp) {
  const auto n = static_cast<std::int64_t>(token_col.size());
  for (std::int64_t i = 0; i < n; ++i) {
    float* row = out + i * dim;
    const std::int64_t col = token_col[static_cast<std::size_t>(i)];
    if (col >= 0) std::copy_n(wte + col * dim, dim, row);
    else std::fill_n(row, dim, 0.0f);
  }
  // Exactly one rank holds each row, so the sum is exact (x + 0 = x).
  if (tp != nullptr) tp->all_reduce(out, static_cast<std::size_t>(n * dim));
  if (wpe == nullptr) return;
  ctx.pool().parallel_for(n, 16, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const float* pos = wpe + (i % seq) * dim;
      float* row = out + i * dim;
      for (std::int64_t j = 0; j < dim; ++j) row[j] += pos[j];
    }
  });
}

namespace {
// dwpe[t] += dout, and row_of(col) += dout for each held token, in position order.
template <typename RowOf>
void scatter_backward(float* dwpe, const std::vector<std::int64_t>& token_col, const float* dout,
                      std::int64_t seq, std::int64_t dim, RowOf row_of) {
  const auto n = static_cast<std::int64_t>(token_col.size());
  for (std::int64_t i = 0; i < n; ++i) {
    const float* d = dout + i * dim;
    if (dwpe != nullptr) {
      float* pos = dwpe + (i % seq) * dim;
      for (std::int64_t j = 0; j < dim; ++j) pos[j] += d[j];
    }
    const std::int64_t col = token_col[static_cast<std::size_t>(i)];
    if (col < 0) continue;
    float* row = row_of(col);
    for (std::int64_t j = 0; j < dim; ++j) row[j] += d[j];
  }
}
}  // namespace

void embedding_backward(float* dwte, float* dwpe, const std::vector<std::int64_t>& token_col,
                        const float* dout, std::int64_t seq, std::int64_t dim) {
  scatter_backward(dwpe, token_col, dout, seq, dim, [&](std::int64_t col) { return dwte + col * dim; });
}

void embedding_backward_rows(EmbeddingRows& rows, float* dwpe,
                             const std::vector<std::int64_t>& token_col, const float* dout,
                             std::int64_t seq, std::int64_t dim) {
  rows.dim = dim;
  rows.cols.clear();
  for (std::int64_t col : token_col)
    if (col >= 0) rows.cols.push_back(col);
  std::sort(rows.cols.begin(), rows.cols.end());
  rows.cols.erase(std::unique(rows.cols.begin(), rows.cols.end()), rows.cols.end());
  rows.values.assign(rows.cols.size() * static_cast<std::size_t>(dim), 0.0f);
  scatter_backward(dwpe, token_col, dout, seq, dim, [&](std::int64_t col) {
    const auto slot = std::lower_bound(rows.cols.begin(), rows.cols.end(), col) - rows.cols.begin();
    return rows.values.data() + slot * dim;
  });
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
                                  const std::vector<std::int64_t>& target_col,
                                  const tensor::LogitShape& shape, float dloss_scale,
                                  float* scratch, comm::Group* tp) {
  const auto rows = static_cast<std::size_t>(shape.rows);
  float* row_max = scratch;
  float* sums = scratch + rows;  // [sum_exp | target_logit | holders]
  float* holders = sums + 2 * rows;
  for (std::size_t i = 0; i < rows; ++i) holders[i] = target_col[i] >= 0 ? 1.0f : 0.0f;
  if (tp == nullptr || tp->size() == 1) {  // the whole vocabulary here: one pass per row
    check_target_holders(holders, rows);
    tensor::crossentropy_local(ctx, losses, logits, target_col.data(), sums, dloss_scale, shape);
    return;
  }
  tensor::crossentropy_local_max(ctx, row_max, logits, shape);
  tp->all_reduce(row_max, rows, comm::ReduceOp::kMax);
  tensor::crossentropy_local_sums(ctx, sums, logits, target_col.data(), row_max, shape);
  // Counting the holders of each target in the same all-reduce costs `rows`
  // floats and turns shards that miss (or repeat) a row from a silently wrong
  // loss into the same error on every rank.
  tp->all_reduce(sums, 3 * rows, comm::ReduceOp::kSum);
  check_target_holders(holders, rows);
  tensor::crossentropy_finish(ctx, losses, logits, target_col.data(), row_max, sums, dloss_scale,
                              shape);
}

}  // namespace ntp::model
