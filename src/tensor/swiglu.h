#pragma once
// SwiGLU (Llama's feed-forward activation): out = silu(gate) * up, with
// silu(x) = x * sigmoid(x). The input interleaves each neuron's pair, [count, 2]
// = (gate, up): the unit-major output of a column-parallel layer whose unit
// is a neuron's gate row followed by its up row.
#include <cstdint>

#include "tensor/context.h"

namespace ntp::tensor {

// out [count] from gate_up [count, 2].
void swiglu_forward(Context& ctx, float* out, const float* gate_up, std::int64_t count);
// dgate_up [count, 2] += gradient through out given dout [count] (accumulating).
void swiglu_backward(Context& ctx, float* dgate_up, const float* gate_up, const float* dout,
                     std::int64_t count);

}  // namespace ntp::tensor
