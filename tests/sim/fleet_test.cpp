#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <random>
#include <set>

#include "sim/fleet.h"
#include "test_scenarios.h"

namespace ntp::sim {
namespace {

TEST(Fleet, ElementsMapToGroupsForEveryBlastRadius) {
  Scenario s = testing::small_scenario();
  s.cluster.domain_size = 16;  // two TP groups of 8 per domain
  for (const int blast : {1, 2, 4, 8, 16}) {
    s.failures.blast_radius = blast;
    validate(s);
    Fleet fleet{Topology(s)};
    const Topology& topo = fleet.topology();
    for (int e = 0; e < topo.elements(); ++e) fleet.fail(e);
    for (int d = 0; d < topo.physical_domains(); ++d) {
      EXPECT_EQ(fleet.failed_gpus(d), 16) << blast;
      for (int g = 0; g < topo.groups_per_domain; ++g) EXPECT_EQ(fleet.active(d, g), 0) << blast;
    }
    for (int e = 0; e < topo.elements(); ++e) fleet.repair(e);
    for (int d = 0; d < topo.physical_domains(); ++d) EXPECT_EQ(fleet.failed_gpus(d), 0);
  }
}

// Random failures, repairs and swap completions: the pool keeps a one-to-one
// map from job domains to physical domains, lends only free healthy spares,
// and never leaves a failed job domain waiting while a healthy spare is free.
TEST(SparePool, InvariantsHoldUnderRandomEvents) {
  Scenario s = testing::small_scenario();
  s.spares.domains = 3;
  const Topology topo(s);
  Fleet fleet(topo);
  SparePool pool(topo);
  std::deque<SparePool::Swap> in_flight;
  std::vector<SparePool::Swap> started;
  std::mt19937_64 rng(11);
  for (int step = 0; step < 20000; ++step) {
    started.clear();
    const int choice = static_cast<int>(rng() % 3);
    const int e = static_cast<int>(rng() % static_cast<unsigned>(topo.elements()));
    const int d = topo.domain_of(e);
    if (choice == 0 && !fleet.down(e)) {
      fleet.fail(e);
      pool.on_failure(d, fleet, started);
    } else if (choice == 1 && fleet.down(e)) {
      fleet.repair(e);
      pool.on_repair(d, fleet, started);
    } else if (choice == 2 && !in_flight.empty()) {
      const SparePool::Swap swap = in_flight.front();
      in_flight.pop_front();
      pool.on_swap_done(swap, fleet, started);
    }
    in_flight.insert(in_flight.end(), started.begin(), started.end());

    std::set<int> used;
    for (int l = 0; l < topo.job_domains; ++l) {
      ASSERT_TRUE(used.insert(pool.physical(l)).second) << "two job domains on one physical";
      ASSERT_EQ(pool.logical(pool.physical(l)), l);
    }
    for (const SparePool::Swap& swap : in_flight) {
      ASSERT_EQ(pool.logical(swap.spare), -1);
      ASSERT_TRUE(used.insert(swap.spare).second) << "a spare lent twice";
    }
    ASSERT_LE(static_cast<int>(used.size()) + pool.free_spares(), topo.physical_domains());
    if (pool.free_spares() > 0) {
      for (int l = 0; l < topo.job_domains; ++l) {
        const bool swapping = std::any_of(in_flight.begin(), in_flight.end(),
                                          [l](const SparePool::Swap& w) { return w.logical == l; });
        ASSERT_FALSE(fleet.failed_gpus(pool.physical(l)) > 0 && !swapping)
            << "a failed job domain waits while a spare is free";
      }
    }
  }
}

}  // namespace
}  // namespace ntp::sim
