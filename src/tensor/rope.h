#pragma once
// Rotary position embedding (RoPE), interleaved-pair convention (Meta's Llama
// and llama2.c's run.c): in every query and key head, the pair of elements
// (2j, 2j+1) at position t is rotated by the angle t * theta^(-2j / head_dim).
// (Hugging Face's checkpoints rotate half-split pairs (j, j + head_dim/2)
// instead and permute the q/k weight rows to match; llama2.c's checkpoints
// use the interleaved pairs, as here.) RoPE has no parameters.
//
// It rotates, in place, the query and key heads of a packed qkv tensor laid
// out as attention.h describes; the value heads are left alone.
#include <cstdint>
#include <vector>

#include "tensor/attention.h"
#include "tensor/context.h"

namespace ntp::tensor {

// cos and sin of every (position, pair) angle, [positions, head_dim / 2] each,
// computed in float as llama2.c's run.c does.
struct RopeTable {
  std::int64_t positions = 0, head_dim = 0;
  std::vector<float> cos, sin;
};
RopeTable rope_table(std::int64_t positions, std::int64_t head_dim, float theta);

// qkv [B*T, shape.qkv_row()]: rotates its query and key heads by position t.
void rope_forward(Context& ctx, float* qkv, const AttentionShape& shape, const RopeTable& table);
// The transpose (the rotation by -angle), in place on the gradient dqkv: the
// gradient with respect to the unrotated q and k.
void rope_backward(Context& ctx, float* dqkv, const AttentionShape& shape, const RopeTable& table);

}  // namespace ntp::tensor
