// Fail-slow GPUs under the three treatments (docs/sim.md, "Fail-slow").
#include <gtest/gtest.h>

#include <vector>

#include "sim/failslow.h"
#include "sim/pricing.h"
#include "sim/timeline.h"
#include "test_scenarios.h"

namespace ntp::sim {
namespace {

std::size_t idx(SlowTreatment t) { return static_cast<std::size_t>(t); }

// The reference with every slow GPU at half speed.
Scenario half_speed() {
  Scenario s;
  s.failslow.rate_per_gpu_day = 1e-3;
  s.failslow.slowdown = {SlowdownKind::kFixed, 2.0, 2.0, {}, {}};
  return s;
}

// ignore keeps equal unit counts, so the slow GPU does a healthy share at half
// speed: every phase takes twice as long. ntp-slow lays the units out by speed
// (layout::JobConfig::speeds): the slow GPU holds about half a share and the
// group runs near 31.5 / 32 of its healthy compute rate.
TEST(FailSlow, NtpSlowLaysOutBySpeed) {
  const Scenario s = half_speed();
  const StepModel m(s);
  std::vector<double> speeds(32, 1.0);
  speeds[0] = 0.5;
  const double c = m.compute_s(32);
  EXPECT_NEAR(m.compute_with_speeds_s(speeds, false), 2.0 * c, 1e-12 * c);
  const double weighted = m.compute_with_speeds_s(speeds, true);
  EXPECT_LT(weighted, 1.1 * c * 32.0 / 31.5);
  EXPECT_GT(weighted, c * 32.0 / 31.5 * (1.0 - 1e-12));
  // A healthy group: speeds all 1 give the equal layout either way.
  EXPECT_DOUBLE_EQ(m.compute_with_speeds_s(std::vector<double>(32, 1.0), true), c);

  const FailSlowPricing p(s, m);
  const double comm = m.microbatch_s(32) - c;
  EXPECT_NEAR(p.stage_pace(SlowTreatment::kIgnore, 2.0), m.microbatch_s(32) / (2.0 * c + comm), 1e-12);
  EXPECT_NEAR(p.stage_pace(SlowTreatment::kNtpSlow, 2.0), m.microbatch_s(32) / (weighted + comm), 1e-12);
  // Laid out in equal counts (a broken ntp-slow) it would be no better than ignore.
  EXPECT_GT(p.stage_pace(SlowTreatment::kNtpSlow, 2.0), 1.5 * p.stage_pace(SlowTreatment::kIgnore, 2.0));
}

// One slow GPU in replica 3 of 256: ignore slows the whole job to its
// pipeline's pace, drop loses the replica, ntp-slow keeps the replica at the
// batch share its pace allows.
TEST(FailSlow, EachTreatmentPricesTheJobAsDocumented) {
  const Scenario s = half_speed();
  const StepModel m(s);
  const FailSlowPricing p(s, m);
  const std::vector<SlowGpu> one{{3, 2.0}};
  const double pipeline = (m.microbatches() + m.bubble_ratio()) * m.microbatch_s(32);
  const double pace = p.stage_pace(SlowTreatment::kIgnore, 2.0);
  EXPECT_NEAR(p.value(SlowTreatment::kIgnore, one), m.step_s(32) / (pipeline / pace + m.step_s(32) - pipeline),
              1e-12);
  EXPECT_DOUBLE_EQ(p.value(SlowTreatment::kDrop, one), 255.0 / 256.0);
  const double share = m.proportional_share(p.stage_pace(SlowTreatment::kNtpSlow, 2.0));
  EXPECT_GT(share, 0.9);
  EXPECT_DOUBLE_EQ(p.value(SlowTreatment::kNtpSlow, one), (255.0 + share) / 256.0);
  // Two slow GPUs of one replica cost it once; of two replicas, twice.
  EXPECT_DOUBLE_EQ(p.value(SlowTreatment::kDrop, {{3, 2.0}, {3, 2.0}}), 255.0 / 256.0);
  EXPECT_DOUBLE_EQ(p.value(SlowTreatment::kDrop, {{3, 2.0}, {4, 2.0}}), 254.0 / 256.0);
  EXPECT_EQ(p.value(SlowTreatment::kIgnore, {}), 1.0);
}

// On a timeline: off (rate 0) nothing happens and the fail-stop figures are
// as before; on, ntp-slow keeps the most and ignore the least, and a slow
// process of its own leaves the fail-stop history unchanged.
TEST(FailSlow, TimelinePricesTheTreatmentsOnTheSameHistory) {
  Scenario s = testing::small_scenario();
  s.failures.rate_per_gpu_day = 0.01;
  const TimelineSeed off = run_timeline_seed(s, Pricing(s), nullptr, 0);
  EXPECT_EQ(off.slow_events, 0);
  for (const double g : off.slow_goodput) EXPECT_EQ(g, 1.0);
  s.failslow.rate_per_gpu_day = 0.02;
  s.failslow.duration = {RepairKind::kFixed, 5.0, 0.0};
  const TimelineSeed on = run_timeline_seed(s, Pricing(s), nullptr, 0);
  EXPECT_GT(on.slow_events, 50);  // 256 GPUs x 30 days x 0.02
  EXPECT_EQ(on.failure_digest, off.failure_digest);
  EXPECT_EQ(on.failures, off.failures);
  EXPECT_NEAR(on.goodput[static_cast<std::size_t>(Policy::kNtp)],
              off.goodput[static_cast<std::size_t>(Policy::kNtp)], 1e-12);
  EXPECT_LT(on.slow_goodput[idx(SlowTreatment::kIgnore)], on.slow_goodput[idx(SlowTreatment::kDrop)]);
  EXPECT_LT(on.slow_goodput[idx(SlowTreatment::kDrop)], on.slow_goodput[idx(SlowTreatment::kNtpSlow)]);
  EXPECT_LT(on.slow_goodput[idx(SlowTreatment::kNtpSlow)], 1.0);
  EXPECT_EQ(on.slow_pause_hours[idx(SlowTreatment::kIgnore)], 0.0);
}

}  // namespace
}  // namespace ntp::sim
