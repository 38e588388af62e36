// Property tests of aligned, speed-weighted layouts (shares.h): random jobs of
// 1-72 slots with random failed slots, several degraded replicas, align in
// {1, 8, 64} and random slot speeds, and every preset and example model shape
// at every TP degree. The checkers (layout_checks.h) are each shown to fail
// in layout_checks_test.cpp.
#include <gtest/gtest.h>

#include "layout/errors.h"
#include "layout/sync_partition.h"
#include "layout_checks.h"
#include "random_job.h"

namespace ntp::layout {
namespace {

using testing::job_violation;
using testing::pick;

std::string describe(const JobConfig& c) {
  return "U=" + std::to_string(c.units) + " n=" + std::to_string(c.tp) +
         " R=" + std::to_string(c.replicas) + " align=" + std::to_string(c.align) +
         " failed=" + format_failed_slots(c.failed) + " min_tp=" + std::to_string(c.min_tp) +
         " speeds of " + std::to_string(c.speeds.size()) + " replicas";
}

TEST(AlignedLayoutProperty, RandomJobsHoldEveryInvariant) {
  std::mt19937_64 rng(33);
  int checked = 0, halved = 0, core_senders = 0, aligned = 0, remainders = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    JobConfig config = testing::random_config(rng);
    config.align = testing::random_align(rng);
    config.speeds = testing::random_speeds(rng, config.replicas, config.tp);
    if (!testing::some_replica_trains(config)) continue;
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + describe(config));
    const JobLayout job = plan_job(config);
    ASSERT_EQ(job_violation(job, config), "");
    ++checked;
    aligned += job.block > 1;
    remainders += job.block > 1 && config.units % job.block != 0;
    for (const auto& l : job.replicas) {
      if (l->dropped) continue;
      halved += l->block < job.block;
      for (const SlotTransfer& t : l->pre_sync) core_senders += l->is_core(t.from);
    }
  }
  // The generator must reach the cases that matter.
  EXPECT_GT(checked, 3000);
  EXPECT_GT(aligned, 1000);
  EXPECT_GT(remainders, 500);
  EXPECT_GT(halved, 20);         // a slow slot forced a smaller block
  EXPECT_GT(core_senders, 200);  // a core slot's share exceeded |S_j|
}

// align 1 at equal speeds is the split before aligned shares existed:
// floor/ceil shares, larger first, S(U, K) sizes within one unit.
TEST(AlignedLayoutProperty, AlignOneAtEqualSpeedsIsTodaysLayout) {
  std::mt19937_64 rng(34);
  for (int trial = 0; trial < 2000; ++trial) {
    const JobConfig config = testing::random_config(rng);  // align 1, no speeds
    if (!testing::some_replica_trains(config)) continue;
    const JobLayout job = plan_job(config);
    ASSERT_EQ(job.block, 1);
    ASSERT_EQ(job.sync_partition, sync_partition(config.units, job.sync_degree));
    for (int j = 0; j < job.sync_degree; ++j)
      ASSERT_EQ(job.sync_partition[static_cast<size_t>(j)].size(),
                balanced_share(config.units, job.sync_degree, j));
    for (const auto& l : job.replicas) {
      if (l->dropped) continue;
      const int k = static_cast<int>(l->active.size());
      for (int i = 0; i < k; ++i)
        ASSERT_EQ(l->slots[static_cast<size_t>(l->active[static_cast<size_t>(i)])].size(),
                  balanced_share(config.units, k, i));
      ASSERT_EQ(*l, replica_layout(config.units, config.tp, l->active, job.sync_degree));
    }
  }
}

TEST(AlignedLayoutProperty, HealthyJobIsSWithEmptyPlans) {
  std::mt19937_64 rng(35);
  for (int trial = 0; trial < 1000; ++trial) {
    JobConfig config = testing::random_config(rng);
    config.failed.clear();
    config.align = testing::random_align(rng);
    const JobLayout job = plan_job(config);
    ASSERT_EQ(job.sync_degree, config.tp);
    for (const auto& l : job.replicas) {
      ASSERT_TRUE(l->pre_sync.empty() && l->post_sync.empty());
      for (int slot = 0; slot < config.tp; ++slot)
        ASSERT_EQ(l->slots[static_cast<size_t>(slot)],
                  job.sync_partition[static_cast<size_t>(slot)]);
    }
  }
}

// The unit kinds of every model preset (src/model/config.cpp) and of the
// example shapes (examples/train use the presets; examples/sim the 480B GPT):
// heads whole, FFN neurons and vocabulary rows in blocks of 64, as the
// trainer asks (job_config).
struct Kind {
  const char* name;
  Unit units;
  Unit align;
};

std::vector<Kind> preset_and_example_kinds() {
  return {{"tiny heads", 4, 1},     {"tiny ffn", 256, 64},        {"tiny vocab", 256, 64},
          {"small heads", 8, 1},    {"small ffn", 1024, 64},      {"small vocab", 50304, 64},
          {"gpt2 heads", 12, 1},    {"gpt2 ffn", 3072, 64},       {"gpt2 vocab", 50304, 64},
          {"llama-tiny kv", 2, 1},  {"llama-tiny ffn", 172, 64},  {"llama-tiny vocab", 256, 64},
          {"llama-small kv", 4, 1}, {"llama-small ffn", 688, 64}, {"llama-small vocab", 32000, 64},
          {"llama-1b kv", 8, 1},    {"llama-1b ffn", 5632, 64},   {"llama-1b vocab", 32000, 64},
          {"480B heads", 128, 1},   {"480B ffn", 81920, 64},      {"480B vocab", 131072, 64}};
}

TEST(AlignedLayoutProperty, EveryPresetAndExampleShapeAtEveryDegree) {
  std::mt19937_64 rng(36);
  int checked = 0;
  for (const Kind& kind : preset_and_example_kinds()) {
    for (int tp = 1; tp <= 72; ++tp) {
      if (kind.units < tp) continue;
      for (int pattern = 0; pattern < 3; ++pattern) {
        JobConfig config{
            .units = kind.units, .tp = tp, .replicas = pick(rng, 1, 4), .align = kind.align};
        if (pattern > 0) config.failed = testing::random_failures(rng, config.replicas, tp, 0.6);
        if (pattern > 1) config.speeds = testing::random_speeds(rng, config.replicas, tp);
        if (!testing::some_replica_trains(config)) continue;
        SCOPED_TRACE(std::string(kind.name) + ": " + describe(config));
        ASSERT_EQ(job_violation(plan_job(config), config), "");
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 2000);
}

}  // namespace
}  // namespace ntp::layout
