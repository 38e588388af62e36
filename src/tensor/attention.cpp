#include "tensor/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tensor/attention_heads.h"
#include "tensor/gpu.h"
#include "tensor/simd/loops.h"

namespace ntp::tensor {

namespace {

using attention_detail::for_each_group;
using attention_detail::Slice;

// The reference path: per (b, t, h) one row of scores, its softmax and the
// weighted sum of value rows, over the causal lower triangle only.
void loops_forward(Context& ctx, float* out, float* att, const float* qkv, const AttentionShape& shape) {
  const Slice sl{shape};
  const std::int64_t hd = shape.head_dim, T = shape.seq;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const simd::Loops& L = simd::loops();
  for_each_group(ctx, shape, [&](std::int64_t b, std::int64_t first) {
    for (std::int64_t h = first; h < first + shape.group; ++h) {
      for (std::int64_t t = 0; t < T; ++t) {
        const float* q = qkv + sl.q_at(b, t, h);
        float* p = att + sl.att_at(b, h, t);
        for (std::int64_t t2 = 0; t2 <= t; ++t2) p[t2] = L.dot(q, qkv + sl.k_at(b, t2, h), hd) * scale;
        const float sum = L.exp_shifted_sum(p, L.max(p, t + 1), t + 1);
        L.scale(p, 1.0f / sum, t + 1);
        std::fill(p + t + 1, p + T, 0.0f);  // masked
        float* o = out + sl.out_at(b, t, h);
        std::fill(o, o + hd, 0.0f);
        for (std::int64_t t2 = 0; t2 <= t; ++t2) L.axpy(o, p[t2], qkv + sl.v_at(b, t2, h), hd);
      }
    }
  });
}

void loops_backward(Context& ctx, float* dqkv, const float* dout, const float* qkv, const float* att,
                    const AttentionShape& shape) {
  const Slice sl{shape};
  const std::int64_t hd = shape.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const simd::Loops& L = simd::loops();
  for_each_group(ctx, shape, [&](std::int64_t b, std::int64_t first) {
    thread_local std::vector<float> dpre;
    dpre.resize(static_cast<std::size_t>(shape.seq));
    for (std::int64_t h = first; h < first + shape.group; ++h) {
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
    }
  });
}

AttentionPath resolve(AttentionPath path, const AttentionShape& shape) {
  return path == AttentionPath::kAuto ? attention_path_for(shape) : path;
}

}  // namespace

// Measured with model_bench's attention benchmarks (docs/model.md): below
// this many positions the per-call overhead of the small GEMMs outweighs
// what they save over the vector loops.
constexpr std::int64_t kGemmFromSeq = 16;

AttentionPath attention_path_for(const AttentionShape& shape) {
  return shape.seq >= kGemmFromSeq ? AttentionPath::kGemm : AttentionPath::kLoops;
}

std::string_view attention_path_name(AttentionPath path) {
  switch (path) {
    case AttentionPath::kAuto: return "auto";
    case AttentionPath::kLoops: return "loops";
    case AttentionPath::kGemm: return "gemm";
  }
  return "unknown";
}

void attention_forward(Context& ctx, float* out, float* att, const float* qkv, const AttentionShape& shape,
                       AttentionPath path) {
  NTP_ON_GPU(ctx, attention_forward, out, att, qkv, shape);
  if (resolve(path, shape) == AttentionPath::kGemm) attention_detail::gemm_forward(ctx, out, att, qkv, shape);
  else loops_forward(ctx, out, att, qkv, shape);
}

void attention_backward(Context& ctx, float* dqkv, const float* dout, const float* qkv, const float* att,
                        const AttentionShape& shape, AttentionPath path) {
  NTP_ON_GPU(ctx, attention_backward, dqkv, dout, qkv, att, shape);
  if (resolve(path, shape) == AttentionPath::kGemm) {
    attention_detail::gemm_backward(ctx, dqkv, dout, qkv, att, shape);
  } else {
    loops_backward(ctx, dqkv, dout, qkv, att, shape);
  }
}

}  // namespace ntp::tensor
