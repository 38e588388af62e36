#pragma once
// Causal self-attention over the heads a rank holds, multi-head (GPT-2) or
// grouped-query (Llama: `group` query heads share one key and one value
// head). qkv is [B*T, groups * (group + 2) * head_dim], group-major: per
// group its query heads, then its key head, then its value head, head_dim
// each -- the unit-major layout of the column-parallel QKV layer (group 1 is
// GPT-2's per-head q, k, v). out is [B*T, heads*head_dim], query heads in
// order; att keeps the softmax probabilities [B, heads, T, T] (lower
// triangle used) for the backward pass.
#include <cstdint>

#include "tensor/context.h"

namespace ntp::tensor {

struct AttentionShape {
  std::int64_t batch = 0;
  std::int64_t seq = 0;
  std::int64_t heads = 0;  // query heads held by this rank, a multiple of group
  std::int64_t head_dim = 0;
  std::int64_t group = 1;  // query heads per key/value head
  std::int64_t groups() const { return heads / group; }
  std::int64_t qkv_row() const { return groups() * (group + 2) * head_dim; }
};

void attention_forward(Context& ctx, float* out, float* att, const float* qkv,
                       const AttentionShape& shape);

// dqkv += gradient through the attention given dout (accumulating).
void attention_backward(Context& ctx, float* dqkv, const float* dout, const float* qkv,
                        const float* att, const AttentionShape& shape);

}  // namespace ntp::tensor
