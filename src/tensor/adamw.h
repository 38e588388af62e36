#pragma once
// The fused AdamW update: one pass over a contiguous range of parameters,
// gradients and both moments (no temporaries, each array read once).
#include <cstdint>

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

// sum of squares in double (the global gradient norm is accumulated across tensors and ranks)
double sum_squares(Context& ctx, const float* x, std::int64_t count);
// The same sum on the calling thread, in a fixed order: the same values give
// the same bits on any rank (the exact gradient norm relies on it).
double sum_squares_serial(const float* x, std::int64_t count);

}  // namespace ntp::tensor
