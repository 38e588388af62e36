#pragma once
// Vocabulary-parallel pieces of the model: each TP rank holds a set of rows of
// the token embedding and of the LM head (tied for GPT-2, untied for Llama). A token id is looked up in the rank's
// intervals; ranks that do not hold it contribute zeros to the embedding
// all-reduce, and the cross-entropy all-reduces the row max and sum-exp.
#include <cstdint>
#include <functional>
#include <vector>

#include "comm/group.h"
#include "layout/interval_set.h"
#include "tensor/context.h"
#include "tensor/cross_entropy.h"

namespace ntp::model {

// Column of each token in this rank's rows, -1 where another rank holds it.
// Throws std::invalid_argument naming `what` and the position of an id outside [0, vocab).
std::vector<std::int64_t> local_columns(const layout::IntervalSet& rows, const std::int32_t* ids,
                                        std::int64_t count, std::int64_t vocab, const char* what);

// The TP group's all-reduce of `count` floats where the model's kernels keep
// them: the group's own call on the host, or staged through host memory for a
// GPU (Model::all_reduce). Empty for a single rank.
using KernelAllReduce = std::function<void(float* data, std::size_t count, comm::ReduceOp op)>;

// The positions of a batch grouped by the embedding row they read: for group
// g, row[g] is a local column and positions[start[g] .. start[g+1]) the
// positions holding it, ascending; rows ascending, each once. The backward
// adds each row's gradients in this order, so any backend gives the bits of
// a loop over the positions.
struct RowGroups {
  std::vector<std::int64_t> row, start, positions, slot;  // slot[g] = g
  std::int64_t groups() const { return static_cast<std::int64_t>(row.size()); }
};
RowGroups row_groups(const std::vector<std::int64_t>& token_col);
// The same arrays where the kernels read them (host or device memory).
struct RowGroupsView {
  const std::int64_t *row = nullptr, *start = nullptr, *positions = nullptr, *slot = nullptr;
  std::int64_t groups = 0;
};

// out[b, t] = wte[token] + wpe[t] (wpe null: no learned positions, Llama);
// cols: the tokens' local columns where the kernels read them.
void embedding_forward(tensor::Context& ctx, float* out, const std::int64_t* cols, std::int64_t n,
                       const float* wte, const float* wpe, std::int64_t seq, std::int64_t dim,
                       const KernelAllReduce& reduce);
// dwte[col] += dout (held tokens only), dwpe[t] += dout (dwpe may be null)
void embedding_backward(tensor::Context& ctx, float* dwte, float* dwpe, const RowGroupsView& groups,
                        const float* dout, std::int64_t n, std::int64_t seq, std::int64_t dim);

// The embedding's share of the tied wte gradient, kept apart from the LM
// head's so that the larger part can be synchronized before backward ends:
// the rows `cols` (local columns, ascending, each once) of width `dim`.
struct EmbeddingRows {
  std::int64_t dim = 0;
  std::vector<std::int64_t> cols;
  std::vector<float> values;  // [cols, dim]
};
// As embedding_backward, but wte's part goes into `rows` (replaced) instead
// of dwte; `scratch` holds groups x dim floats where the kernels write.
void embedding_backward_rows(tensor::Context& ctx, EmbeddingRows& rows, float* dwpe, const RowGroups& host_groups,
                             const RowGroupsView& groups, float* scratch, const float* dout, std::int64_t n,
                             std::int64_t seq, std::int64_t dim);

// Per-token losses; logits are replaced by dloss_scale * d(loss)/d(logits).
// `scratch` holds 4 * rows floats; target_col is on the host, kernel_cols
// the same columns where the kernels read them. Throws std::runtime_error, on
// every rank of the TP group alike, if a target's row is held by no rank or by
// several. `rounded`, when set, receives dlogits rounded to bf16 as well
// (tensor::crossentropy_finish).
void vocab_parallel_cross_entropy(tensor::Context& ctx, float* losses, float* logits,
                                  const std::vector<std::int64_t>& target_col, const std::int64_t* kernel_cols,
                                  const tensor::LogitShape& shape, float dloss_scale, float* scratch,
                                  const KernelAllReduce& reduce, tensor::Bf16* rounded = nullptr);

}  // namespace ntp::model
