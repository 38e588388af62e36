#include "tensor/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tensor/simd/loops.h"

namespace ntp::tensor {

namespace {

// Strides of one (batch, query head) slice inside the packed tensors.
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

// Runs fn(b, h) for every batch row and query head, one task per (batch,
// group): the query heads of a group share their key and value gradients, so
// one thread owns them all.
template <typename Fn>
void for_each_head(Context& ctx, const AttentionShape& shape, Fn fn) {
  const std::int64_t groups = shape.groups();
  ctx.pool().parallel_for(shape.batch * groups, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t task = begin; task < end; ++task) {
      const std::int64_t first = (task % groups) * shape.group;
      for (std::int64_t h = first; h < first + shape.group; ++h) fn(task / groups, h);
    }
  });
}

}  // namespace

void attention_forward(Context& ctx, float* out, float* att, const float* qkv,
                       const AttentionShape& shape) {
  const Slice sl{shape};
  const std::int64_t hd = shape.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const simd::Loops& L = simd::loops();
  for_each_head(ctx, shape, [&](std::int64_t b, std::int64_t h) {
    for (std::int64_t t = 0; t < shape.seq; ++t) {
      const float* q = qkv + sl.q_at(b, t, h);
      float* p = att + sl.att_at(b, h, t);
      for (std::int64_t t2 = 0; t2 <= t; ++t2) p[t2] = L.dot(q, qkv + sl.k_at(b, t2, h), hd) * scale;
      const float sum = L.exp_shifted_sum(p, L.max(p, t + 1), t + 1);
      L.scale(p, 1.0f / sum, t + 1);
      float* o = out + sl.out_at(b, t, h);
      std::fill(o, o + hd, 0.0f);
      for (std::int64_t t2 = 0; t2 <= t; ++t2) L.axpy(o, p[t2], qkv + sl.v_at(b, t2, h), hd);
    }
  });
}

void attention_backward(Context& ctx, float* dqkv, const float* dout, const float* qkv,
                        const float* att, const AttentionShape& shape) {
  const Slice sl{shape};
  const std::int64_t hd = shape.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const simd::Loops& L = simd::loops();
  for_each_head(ctx, shape, [&](std::int64_t b, std::int64_t h) {
    thread_local std::vector<float> dpre;
    dpre.resize(static_cast<std::size_t>(shape.seq));
    for (std::int64_t t = 0; t < shape.seq; ++t) {
      const float* p = att + sl.att_at(b, h, t);
      const float* dy = dout + sl.out_at(b, t, h);
      // out = sum p·v: gradients to v and to the probabilities.
      float weighted = 0.0f;  // sum_t2 p * dp
      for (std::int64_t t2 = 0; t2 <= t; ++t2) {
        const std::int64_t base = sl.v_at(b, t2, h);
        dpre[t2] = L.dot(dy, qkv + base, hd);
        weighted += p[t2] * dpre[t2];
        L.axpy(dqkv + base, p[t2], dy, hd);
      }
      // Softmax backward, then the scaled q·k scores.
      const float* q = qkv + sl.q_at(b, t, h);
      float* dq = dqkv + sl.q_at(b, t, h);
      for (std::int64_t t2 = 0; t2 <= t; ++t2) {
        const float ds = p[t2] * (dpre[t2] - weighted) * scale;
        const std::int64_t kbase = sl.k_at(b, t2, h);
        L.axpy(dq, ds, qkv + kbase, hd);
        L.axpy(dqkv + kbase, ds, q, hd);
      }
    }
  });
}

}  // namespace ntp::tensor
