#pragma once
// Learning rate of a step (pure). Linear warm-up over train.warmup_steps
// (step s < W: lr * (s + 1) / W, as llm.c), then `constant` keeps lr and
// `cosine` decays from lr to 0.1 * lr at the last step.
#include <cstdint>

#include "train/config.h"

namespace ntp::train {

double learning_rate(const OptimConfig& train, std::int64_t step);

}  // namespace ntp::train
