#pragma once
// Small scenarios for the simulator tests: fast to run, with unit counts that
// divide the TP degrees used, so closed-form answers are exact.
#include "sim/scenario.h"

namespace ntp::sim::testing {

// 256 GPUs, domains of 8, TP 8, PP 1 (32 replicas); 24 heads, FFN 6144,
// vocabulary 4800: divisible by 8, 6 and 4.
Scenario small_scenario();

}  // namespace ntp::sim::testing
