#pragma once
// Causal multi-head self-attention over the heads a rank holds. qkv is
// [B*T, heads*3*head_dim], head-major (per head: its q, k and v, head_dim
// each), which is the unit-major layout of the column-parallel QKV layer.
// out is [B*T, heads*head_dim]; att keeps the softmax probabilities
// [B, heads, T, T] (lower triangle used) for the backward pass.
#include <cstdint>

#include "tensor/context.h"

namespace ntp::tensor {

struct AttentionShape {
  std::int64_t batch = 0;
  std::int64_t seq = 0;
  std::int64_t heads = 0;  // heads held by this rank
  std::int64_t head_dim = 0;
};

void attention_forward(Context& ctx, float* out, float* att, const float* qkv,
                       const AttentionShape& shape);

// dqkv += gradient through the attention given dout (accumulating).
void attention_backward(Context& ctx, float* dqkv, const float* dout, const float* qkv,
                        const float* att, const AttentionShape& shape);

}  // namespace ntp::tensor
