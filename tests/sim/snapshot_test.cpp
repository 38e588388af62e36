#include <gtest/gtest.h>

#include <cmath>

#include "sim/pricing.h"
#include "sim/snapshot.h"
#include "test_scenarios.h"

namespace ntp::sim {
namespace {

TEST(Snapshot, NoFailuresIsFullThroughputForEveryPolicy) {
  Scenario s = testing::small_scenario();
  s.snapshot.failed_fractions = {0.0};
  const SnapshotResult r = run_snapshot(s, Pricing(s));
  for (int p = 0; p < kPolicyCount; ++p) EXPECT_EQ(r.points[0].mean[static_cast<std::size_t>(p)], 1.0);
  EXPECT_EQ(r.points[0].healthy_groups_mean, 1.0);
}

TEST(Snapshot, HealthyTpGroupFractionIsOneMinusFToTheT) {
  Scenario s = testing::small_scenario();
  s.cluster.gpus = 8192;  // 1,024 TP groups of 8
  s.model.global_batch_tokens = 2048 * 1024;
  s.snapshot.failed_fractions = {0.005, 0.02, 0.05, 0.1};
  s.snapshot.placements = 300;
  validate(s);
  const SnapshotResult r = run_snapshot(s, Pricing(s));
  for (const SnapshotPoint& p : r.points) {
    const double expected = std::pow(1.0 - p.failed_fraction, 8);
    // Sampling exact counts without replacement differs from independent
    // failures by O(t^2 / N); the rest is Monte-Carlo error.
    EXPECT_NEAR(p.healthy_groups_mean, expected, 4.0 * p.healthy_groups_stderr + 2e-3)
        << p.failed_fraction;
    // dp-drop with PP 1 keeps exactly the healthy groups.
    EXPECT_NEAR(p.mean[static_cast<std::size_t>(Policy::kDpDrop)], p.healthy_groups_mean, 1e-12);
    EXPECT_GE(p.mean[static_cast<std::size_t>(Policy::kNtp)],
              p.mean[static_cast<std::size_t>(Policy::kDpDrop)]);
  }
}

TEST(Snapshot, SameSeedSameResultAcrossThreadCounts) {
  Scenario s = testing::small_scenario();
  s.snapshot.failed_fractions = {0.01, 0.05};
  s.run.threads = 1;
  const SnapshotResult a = run_snapshot(s, Pricing(s));
  s.run.threads = 3;
  const SnapshotResult b = run_snapshot(s, Pricing(s));
  for (std::size_t i = 0; i < a.points.size(); ++i) {
    EXPECT_EQ(a.points[i].mean, b.points[i].mean);
    EXPECT_EQ(a.points[i].healthy_groups_mean, b.points[i].healthy_groups_mean);
  }
  s.run.seed = 99;
  const SnapshotResult c = run_snapshot(s, Pricing(s));
  EXPECT_NE(a.points[1].healthy_groups_mean, c.points[1].healthy_groups_mean);
}

TEST(Snapshot, BlastRadiusOfADomainFailsWholeGroups) {
  Scenario s = testing::small_scenario();
  s.failures.blast_radius = 8;
  s.snapshot.failed_fractions = {0.125};  // 4 of 32 domains
  validate(s);
  const SnapshotResult r = run_snapshot(s, Pricing(s));
  EXPECT_DOUBLE_EQ(r.points[0].healthy_groups_mean, 28.0 / 32.0);
  EXPECT_DOUBLE_EQ(r.points[0].mean[static_cast<std::size_t>(Policy::kNtp)], 28.0 / 32.0);
}

}  // namespace
}  // namespace ntp::sim
