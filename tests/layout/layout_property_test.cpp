// Property tests of job layouts and gradient-sync plans on thousands of seeded
// random configurations (DESIGN §3): checked with interval algebra, so a
// 50k-unit layout costs a few intervals, not 50k set entries.
#include <gtest/gtest.h>

#include <set>

#include "layout/errors.h"
#include "layout/sync_partition.h"
#include "layout_checks.h"
#include "random_job.h"

namespace ntp::layout {
namespace {

using testing::random_config;
using testing::some_replica_trains;

// S(U, K) at block 1: K contiguous parts covering [0, U), within one unit.
void check_partition(const JobLayout& job) {
  ASSERT_EQ(static_cast<int>(job.sync_partition.size()), job.sync_degree);
  ASSERT_EQ(testing::partition_violation(job.sync_partition, job.units, 1), "");
}

// The general properties (layout_checks.h: every unit exactly once, core
// slot j ends pre-sync with exactly S_j, post-sync the inverse, a forest of
// transfers), and today's: shares within one unit, only extra slots send.
void check_training_replica(const JobLayout& job, const JobConfig& config, int r) {
  const ReplicaLayout& layout = job.replica(r);
  const int k = static_cast<int>(layout.active.size());
  const int K = job.sync_degree;
  ASSERT_GE(k, config.min_tp);
  ASSERT_GE(k, K);
  ASSERT_EQ(testing::coverage_violation(layout, job.units), "") << "replica " << r;
  ASSERT_EQ(testing::sync_violation(layout, job.sync_partition), "") << "replica " << r;
  for (int slot : layout.active) {
    const Unit units = layout.slots[static_cast<size_t>(slot)].size();
    ASSERT_GE(units, job.units / k) << "replica " << r << " slot " << slot;
    ASSERT_LE(units, (job.units + k - 1) / k) << "replica " << r << " slot " << slot;
  }
  for (const SlotTransfer& t : layout.pre_sync) ASSERT_FALSE(layout.is_core(t.from));
  if (k == K) {
    ASSERT_TRUE(layout.pre_sync.empty());
    for (int j = 0; j < K; ++j)
      ASSERT_EQ(layout.slots[static_cast<size_t>(layout.core[static_cast<size_t>(j)])],
                job.sync_partition[static_cast<size_t>(j)]);
  }
}

// The per-rank view agrees with the replica layout it summarises.
void check_slot_views(const JobLayout& job, int r) {
  const ReplicaLayout& layout = job.replica(r);
  for (int slot = 0; slot < job.tp; ++slot) {
    const SlotView view = job.slot_view(r, slot);
    ASSERT_EQ(view.units, layout.slots[static_cast<size_t>(slot)]);
    ASSERT_EQ(view.trains, layout.is_active(slot) && !layout.dropped);
    ASSERT_EQ(view.sync_group, layout.sync_group(slot));
    if (view.is_core()) {
      IntervalSet after = view.units;
      for (const SlotTransfer& t : view.pre_sync_receives) after.add(t.units);
      ASSERT_EQ(after, view.sync_units);
      ASSERT_TRUE(view.pre_sync_sends.empty());
    } else {
      IntervalSet sent;
      for (const SlotTransfer& t : view.pre_sync_sends) sent.add(t.units);
      ASSERT_EQ(sent, view.units);
      ASSERT_TRUE(view.pre_sync_receives.empty());
    }
  }
}

void check_job(const JobLayout& job, const JobConfig& config) {
  check_partition(job);
  int min_k = config.tp;
  for (int r = 0; r < config.replicas; ++r) {
    const ReplicaLayout& layout = job.replica(r);
    ASSERT_EQ(layout.active, alive_slots(config, r));
    const int k = static_cast<int>(layout.active.size());
    ASSERT_EQ(layout.dropped, k < config.min_tp) << "replica " << r;
    if (layout.dropped) {
      ASSERT_TRUE(layout.core.empty());
      ASSERT_TRUE(layout.pre_sync.empty() && layout.post_sync.empty());
      for (const IntervalSet& s : layout.slots) ASSERT_TRUE(s.empty());
      continue;
    }
    min_k = std::min(min_k, k);
    check_training_replica(job, config, r);
    check_slot_views(job, r);
  }
  ASSERT_EQ(job.sync_degree, min_k);
}

TEST(LayoutProperty, RandomJobsHoldEveryInvariant) {
  std::mt19937_64 rng(20240611);
  int checked = 0, infeasible = 0, mixed_k = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    const JobConfig config = random_config(rng);
    SCOPED_TRACE("trial " + std::to_string(trial) + ": U=" + std::to_string(config.units) + " n=" +
                 std::to_string(config.tp) + " failed=" + format_failed_slots(config.failed) +
                 " min_tp=" + std::to_string(config.min_tp));
    if (!some_replica_trains(config)) {
      EXPECT_THROW(plan_job(config), InfeasibleError);
      ++infeasible;
      continue;
    }
    const JobLayout job = plan_job(config);
    check_job(job, config);
    if (HasFatalFailure()) return;
    std::set<size_t> ks;
    for (const auto& l : job.replicas)
      if (!l->dropped) ks.insert(l->active.size());
    mixed_k += ks.size() >= 3;
    ++checked;
  }
  // The generator must exercise the interesting cases, not only healthy jobs.
  EXPECT_GT(checked, 3000);
  EXPECT_GT(infeasible, 10);
  EXPECT_GT(mixed_k, 300);
}

TEST(LayoutProperty, HealthyJobIsStandardMegatronLayoutWithEmptyPlans) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 1000; ++trial) {
    JobConfig config = random_config(rng);
    config.failed.clear();
    const JobLayout job = plan_job(config);
    ASSERT_EQ(job.sync_degree, config.tp);
    for (const auto& shared : job.replicas) {
      const ReplicaLayout& layout = *shared;
      ASSERT_TRUE(layout.pre_sync.empty());
      ASSERT_TRUE(layout.post_sync.empty());
      Unit next = 0;
      for (int slot = 0; slot < config.tp; ++slot) {
        // Contiguous, in slot order, balanced: Megatron's split (larger parts first).
        const Unit size = config.units / config.tp + (slot < config.units % config.tp);
        ASSERT_EQ(layout.slots[static_cast<size_t>(slot)], IntervalSet::range(next, next + size));
        next += size;
      }
    }
  }
}

TEST(LayoutProperty, UnitsFewerThanActiveSlotsAreRejected) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 500; ++trial) {
    JobConfig config = random_config(rng);
    config.min_tp = 1;
    config.failed.erase(0);  // replica 0 trains with all tp slots
    if (config.tp < 2) continue;
    config.units = testing::pick(rng, 1, config.tp - 1);
    try {
      plan_job(config);
      FAIL() << "U=" << config.units << " < tp=" << config.tp << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("active slots of replica"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace ntp::layout
