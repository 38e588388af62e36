#pragma once
// What both attention paths share: where a (batch, head) slice lives inside
// the packed tensors, and the split of the work into (batch, KV group) tasks.
#include <cstdint>

#include "tensor/attention.h"

namespace ntp::tensor::attention_detail {

// Offsets of one (batch, query head) slice inside the packed tensors.
struct Slice {
  const AttentionShape& s;
  std::int64_t out_row() const { return s.heads * s.head_dim; }
  std::int64_t group_at(std::int64_t b, std::int64_t t, std::int64_t h) const {
    return (b * s.seq + t) * s.qkv_row() + (h / s.group) * (s.group + 2) * s.head_dim;
  }
  std::int64_t q_at(std::int64_t b, std::int64_t t, std::int64_t h) const {
    return group_at(b, t, h) + (h % s.group) * s.head_dim;
  }
  std::int64_t k_at(std::int64_t b, std::int64_t t, std::int64_t h) const {
    return group_at(b, t, h) + s.group * s.head_dim;
  }
  std::int64_t v_at(std::int64_t b, std::int64_t t, std::int64_t h) const {
    return group_at(b, t, h) + (s.group + 1) * s.head_dim;
  }
  std::int64_t out_at(std::int64_t b, std::int64_t t, std::int64_t h) const {
    return (b * s.seq + t) * out_row() + h * s.head_dim;
  }
  std::int64_t att_at(std::int64_t b, std::int64_t h, std::int64_t t) const {
    return ((b * s.heads + h) * s.seq + t) * s.seq;
  }
};

// Runs fn(b, first_head) once per batch row and KV group, one task each: the
// query heads of a group share their key and value gradients, so one thread
// owns them all.
template <typename Fn>
void for_each_group(Context& ctx, const AttentionShape& shape, Fn fn) {
  const std::int64_t groups = shape.groups();
  ctx.pool().parallel_for(shape.batch * groups, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t task = begin; task < end; ++task) fn(task / groups, (task % groups) * shape.group);
  });
}

// The GEMM path (attention_gemm.cpp).
void gemm_forward(Context& ctx, float* out, float* att, const float* qkv, const AttentionShape& shape);
void gemm_backward(Context& ctx, float* dqkv, const float* dout, const float* qkv, const float* att,
                   const AttentionShape& shape);

}  // namespace ntp::tensor::attention_detail
