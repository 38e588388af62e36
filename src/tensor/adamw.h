#pragma once
// The fused AdamW update: one pass over a contiguous range of parameters,
// gradients and both moments (no temporaries, each array read once).
#include <cstdint>
#include <vector>

#include "tensor/context.h"

namespace ntp::tensor {

struct AdamWStep {
  float lr = 0.0f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled: param -= lr * wd * param
  float grad_scale = 1.0f;    // multiplies every gradient first (norm clipping)
  std::int64_t step = 1;      // 1-based, for the bias corrections
};

void adamw_update(Context& ctx, float* param, const float* grad, float* m, float* v,
                  std::int64_t count, const AdamWStep& step);

// A range of a flat parameter buffer and its decoupled weight decay.
struct AdamWSegment {
  std::int64_t offset = 0;
  std::int64_t count = 0;
  float weight_decay = 0.0f;
};
// The update over several ranges of flat buffers (every tensor of a model) in
// one pass over the pool: each thread takes an equal share of the elements,
// across range boundaries, instead of a pool job (and its barrier) per tensor
// with the small tensors on one thread. step.weight_decay is ignored. With
// `rounded`, a bf16 copy of param (same offsets), each updated element's
// to_bf16 is written there too, while it is in cache: the copy stays current
// without a second pass over the parameters.
void adamw_update(Context& ctx, float* param, const float* grad, float* m, float* v,
                  const std::vector<AdamWSegment>& segments, const AdamWStep& step, Bf16* rounded = nullptr);

// Sum of squares in double (the global gradient norm is accumulated across
// tensors and ranks), over fixed pieces added in order: the same bits at any
// thread count.
double sum_squares(Context& ctx, const float* x, std::int64_t count);
// The same sum on the calling thread, in a fixed order: the same values give
// the same bits on any rank (the exact gradient norm relies on it).
double sum_squares_serial(const float* x, std::int64_t count);
// out[p] = sum_squares_serial of piece p of x (pieces of `piece` elements, the
// last one shorter if count is not a multiple), over the pool. Each thread
// reads four of its pieces side by side (simd::Loops::sum_squares_x4): one
// stream per thread left the memory bandwidth half used.
void sum_squares_pieces(Context& ctx, const float* x, std::int64_t count, std::int64_t piece, double* out);

}  // namespace ntp::tensor
