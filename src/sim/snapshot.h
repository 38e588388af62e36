#pragma once
// Snapshot mode: for each failed fraction f, fail round(f * elements) random
// failure elements of the job, many times, and price each policy in that
// static state. Also reports the fraction of fully healthy TP groups, whose
// expectation is about (1 - f)^tp for single-GPU failures.
#include <array>
#include <vector>

#include "sim/pricing.h"
#include "sim/scenario.h"

namespace ntp::sim {

struct SnapshotPoint {
  double failed_fraction = 0;
  std::array<double, kPolicyCount> mean{};    // throughput relative to failure-free
  std::array<double, kPolicyCount> stderr_{};
  double healthy_groups_mean = 0;             // fraction of TP groups with no failed GPU
  double healthy_groups_stderr = 0;
};

struct SnapshotResult {
  int placements = 0;
  std::vector<SnapshotPoint> points;  // one per scenario.snapshot.failed_fractions entry
};

SnapshotResult run_snapshot(const Scenario& s, const Pricing& pricing);

}  // namespace ntp::sim
