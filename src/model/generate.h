#pragma once
// Text generation from a trained single-rank model (`ntp sample`): sample one
// token at a time from the next-token distribution, the context being the
// last max_seq tokens. Temperature 0 takes the most likely token.
#include <cstdint>
#include <span>
#include <vector>

#include "model/model.h"

namespace ntp::model {

// The token drawn from `probs` at `temperature` for a uniform draw `u` in
// [0, 1): p^(1/T) renormalised, inverse CDF; T = 0 is the argmax (the
// lowest id on a tie). Pure.
std::int32_t pick_token(std::span<const float> probs, double temperature, double u);

// `count` tokens after `prompt` (not included), drawn with a seeded generator.
std::vector<std::int32_t> generate(Model& model, std::span<const std::int32_t> prompt, std::int64_t count,
                                   double temperature, std::uint64_t seed);

}  // namespace ntp::model
