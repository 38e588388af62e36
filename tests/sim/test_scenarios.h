#pragma once
// Small scenarios for the simulator tests: fast to run, with unit counts that
// divide the TP degrees used, so closed-form answers are exact.
#include "sim/scenario.h"

namespace ntp::sim::testing {

// 256 GPUs, domains of 8, TP 8, PP 1 (32 replicas); 24 heads, FFN 6144,
// vocabulary 4800: divisible by 8, 6 and 4. Cut one unit at a time
// (parallelism.align = 1), so the shares are the floor/ceil split.
Scenario small_scenario();

// The same cluster and model as a scenario file (failures at 0.01 per GPU-day,
// 10 days x 3 seeds, 3 snapshot fractions x 20 placements), for the report
// and command-line tests.
const char* small_scenario_toml();

}  // namespace ntp::sim::testing
