#pragma once
// Fused softmax + cross-entropy over vocabulary-parallel logits, split at the
// two points where a TP group must all-reduce (Megatron's vocab-parallel loss):
//   1. local_max      -> all-reduce kMax over the group
//   2. local_sums     -> all-reduce kSum of [sum_exp | target_logit] (2n floats)
//   3. finish         -> per-row loss, and dlogits written in place of logits
// A rank's logits are [n, cols]; only the first `valid` columns are real
// vocabulary (the rest are padding rows of the embedding and get no gradient).
// target_col[i] is the target's column on this rank, or -1 if another rank holds it.
#include <cstdint>

#include "tensor/context.h"

namespace ntp::tensor {

struct LogitShape {
  std::int64_t rows = 0;
  std::int64_t cols = 0;   // vocabulary rows held (padding included)
  std::int64_t valid = 0;  // leading columns that are real vocabulary
};

void crossentropy_local_max(Context& ctx, float* row_max, const float* logits,
                            const LogitShape& shape);

// sums[i] = sum_j exp(logit - row_max[i]); sums[rows + i] = target logit or 0.
// The logits are replaced by exp(logit - row_max) (one exp per element in all).
void crossentropy_local_sums(Context& ctx, float* sums, float* logits,
                             const std::int64_t* target_col, const float* row_max,
                             const LogitShape& shape);

// losses[i] = log(sum_exp) + max - target_logit; the exps become
// dloss_scale * (softmax - onehot) (0 on padding columns). With `rounded`
// (bf16 GEMMs; [rows, cols], dense) each row of dlogits is also rounded to
// bf16 there while it is in cache, for the LM head's backward GEMMs (which
// would otherwise read the whole of dlogits from memory once more to round it).
void crossentropy_finish(Context& ctx, float* losses, float* logits,
                         const std::int64_t* target_col, const float* row_max, const float* sums,
                         float dloss_scale, const LogitShape& shape, Bf16* rounded = nullptr);

// The three passes in one, row by row, for a rank that holds the whole
// vocabulary (no all-reduce between them): each row is read from memory once
// and finished while it is in cache. Bit for bit the passes' result; scratch
// holds 2 * rows floats.
void crossentropy_local(Context& ctx, float* losses, float* logits, const std::int64_t* target_col,
                        float* scratch, float dloss_scale, const LogitShape& shape, Bf16* rounded = nullptr);

}  // namespace ntp::tensor
