#pragma once
// Vocabulary-parallel pieces of the model: each TP rank holds a set of rows of
// the token embedding and of the LM head (tied for GPT-2, untied for Llama). A token id is looked up in the rank's
// intervals; ranks that do not hold it contribute zeros to the embedding
// all-reduce, and the cross-entropy all-reduces the row max and sum-exp.
#include <cstdint>
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

// out[b, t] = wte[token] + wpe[t] (wpe null: no learned positions, Llama)
void embedding_forward(tensor::Context& ctx, float* out, const std::vector<std::int64_t>& token_col,
                       const float* wte, const float* wpe, std::int64_t seq, std::int64_t dim,
                       comm::Group* tp);
// dwte[col] += dout (held tokens only), dwpe[t] += dout (dwpe may be null)
void embedding_backward(float* dwte, float* dwpe, const std::vector<std::int64_t>& token_col,
                        const float* dout, std::int64_t seq, std::int64_t dim);

// The embedding's share of the tied wte gradient, kept apart from the LM
// head's so that the larger part can be synchronized before backward ends:
// the rows `cols` (local columns, ascending, each once) of width `dim`.
struct EmbeddingRows {
  std::int64_t dim = 0;
  std::vector<std::int64_t> cols;
  std::vector<float> values;  // [cols, dim]
};
// As embedding_backward, but wte's part goes into `rows` (replaced) instead of dwte.
void embedding_backward_rows(EmbeddingRows& rows, float* dwpe,
                             const std::vector<std::int64_t>& token_col, const float* dout,
                             std::int64_t seq, std::int64_t dim);

// Per-token losses; logits are replaced by dloss_scale * d(loss)/d(logits).
// `scratch` holds 4 * rows floats. Throws std::runtime_error, on every rank of
// the TP group alike, if a target's row is held by no rank or by several.
void vocab_parallel_cross_entropy(tensor::Context& ctx, float* losses, float* logits,
                                  const std::vector<std::int64_t>& target_col,
                                  const tensor::LogitShape& shape, float dloss_scale,
                                  float* scratch, comm::Group* tp);

}  // namespace ntp::model
