#pragma once
// GPT-2 initialisation that does not depend on the shard: every element's value
// is a function of (seed, tensor, its index in the full tensor), the tensor
// counted by its place in the whole model (TensorSpec::whole_index), so any TP
// layout and any pipeline stage initialises exactly the values a single rank would.
#include <cstdint>
#include <span>

#include "model/parameters.h"

namespace ntp::model {

// Weights ~ N(0, 0.02), the residual projections (proj_wt, fc2_wt) ~
// N(0, 0.02 / sqrt(2 * layers)), biases 0, LayerNorm weights 1.
void init_parameters(const ParameterLayout& layout, std::span<float> values, std::uint64_t seed);

}  // namespace ntp::model
