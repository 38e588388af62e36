#pragma once
// Causal self-attention over the heads a rank holds, multi-head (GPT-2) or
// grouped-query (Llama: `group` query heads share one key and one value
// head). qkv is [B*T, groups * (group + 2) * head_dim], group-major: per
// group its query heads, then its key head, then its value head, head_dim
// each -- the unit-major layout of the column-parallel QKV layer (group 1 is
// GPT-2's per-head q, k, v). out is [B*T, heads*head_dim], query heads in
// order; att keeps the softmax probabilities [B, heads, T, T] for the
// backward pass, zero above the diagonal.
#include <cstdint>
#include <string_view>

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

// How the per-head products run. kLoops, the reference: each score a vector
// dot product and each output row a sum of scaled value rows, over the causal
// lower triangle only. kGemm: per head, scores = Q·Kᵀ and out = P·V (backward:
// dP = dOut·Vᵀ, dV = Pᵀ·dOut, dQ = dS·K, dK = dSᵀ·Q) as sgemm calls on the
// Context's library, in row blocks that skip most of the masked triangle. The
// two agree within the bound derived in attention_gemm.cpp (docs/model.md).
// kAuto: attention_path_for(shape).
enum class AttentionPath { kAuto, kLoops, kGemm };

// The faster path for the shape, by a rule on seq alone (measured with
// model_bench; docs/model.md): every TP degree of a model, whatever heads it
// holds, takes the same path.
AttentionPath attention_path_for(const AttentionShape& shape);
std::string_view attention_path_name(AttentionPath path);

void attention_forward(Context& ctx, float* out, float* att, const float* qkv,
                       const AttentionShape& shape, AttentionPath path = AttentionPath::kAuto);

// dqkv += gradient through the attention given dout (accumulating). att must
// come from attention_forward (either path: both leave the upper triangle 0).
void attention_backward(Context& ctx, float* dqkv, const float* dout, const float* qkv,
                        const float* att, const AttentionShape& shape,
                        AttentionPath path = AttentionPath::kAuto);

}  // namespace ntp::tensor
