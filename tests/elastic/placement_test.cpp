// Multi-host placement: whole replicas per host, contiguous ranks, and the
// flags `ntp train` refuses before anything starts.
#include "elastic/placement.h"

#include <algorithm>
#include <stdexcept>

#include <gtest/gtest.h>

#include "elastic/train_job.h"
#include "train/ntp_trainer.h"

namespace ntp::elastic {
namespace {

train::ParallelConfig parallel(std::int64_t dp, std::int64_t tp, std::map<std::int64_t, std::vector<std::int64_t>> failed = {},
                               std::int64_t min_tp = 1) {
  train::ParallelConfig p;
  p.dp = dp;
  p.tp = tp;
  p.failed = std::move(failed);
  p.min_tp = min_tp;
  return p;
}

TEST(Placement, EachReplicaStaysOnOneHostAndRanksAreContiguous) {
  const auto hosts = place_hosts(parallel(4, 4, {{1, {2}}}), 2);
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[0].replicas, (std::vector<int>{0, 1}));
  EXPECT_EQ(hosts[0].first_rank, 0);
  EXPECT_EQ(hosts[0].ranks, 7);  // replica 1 lost slot 2
  EXPECT_EQ(hosts[1].replicas, (std::vector<int>{2, 3}));
  EXPECT_EQ(hosts[1].first_rank, 7);
  EXPECT_EQ(hosts[1].ranks, 8);
  EXPECT_EQ(describe_placement(hosts), "node 0: replicas 0,1 (ranks 0-6); node 1: replicas 2,3 (ranks 7-14)");
}

TEST(Placement, EveryRankHasExactlyOneHostForManyShapes) {
  for (int nnodes : {1, 2, 3, 4}) {
    for (std::int64_t per_host : {1, 2, 3}) {
      const train::ParallelConfig p = parallel(nnodes * per_host, 3, {{0, {1}}});
      const auto hosts = place_hosts(p, nnodes);
      const auto places = train::job_places(p);
      int next = 0;
      for (const HostPlacement& h : hosts) {
        EXPECT_EQ(h.first_rank, next);
        for (int r = h.first_rank; r < h.first_rank + h.ranks; ++r) {
          const int replica = places[static_cast<std::size_t>(r)].replica;
          EXPECT_NE(std::find(h.replicas.begin(), h.replicas.end(), replica), h.replicas.end())
              << "rank " << r << " of replica " << replica << " is not on node " << h.node;
        }
        next += h.ranks;
      }
      EXPECT_EQ(next, static_cast<int>(places.size()));
    }
  }
}

TEST(Placement, ReplicasThatDoNotSplitOverTheHostsAreRefusedNamingTheFlag) {
  try {
    place_hosts(parallel(3, 4), 2);
    FAIL() << "3 replicas on 2 hosts";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--nnodes 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("parallel.dp = 3"), std::string::npos) << e.what();
  }
  // Replica 1 keeps fewer than min_tp slots: node 1 would have nothing to run.
  EXPECT_THROW(place_hosts(parallel(2, 4, {{1, {0, 1, 2}}}, 2), 2), std::invalid_argument);
  EXPECT_THROW(place_hosts(parallel(2, 4), 0), std::invalid_argument);
}

TEST(NodeOptions, InconsistentFlagsAreRefusedNamingTheFlag) {
  const auto message = [](NodeOptions node) {
    try {
      validate(node);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(message({}), "");
  EXPECT_EQ(message({2, 1, "redis://h:1?job=abc", ""}), "");
  EXPECT_NE(message({2, 0, "", ""}).find("--store redis://"), std::string::npos);
  EXPECT_NE(message({2, 2, "redis://h:1", ""}).find("--node-rank 2"), std::string::npos);
  EXPECT_NE(message({0, 0, "", ""}).find("--nnodes 0"), std::string::npos);
  EXPECT_NE(message({1, 0, "file:/tmp/x", ""}).find("--store 'file:/tmp/x'"), std::string::npos);
  EXPECT_NE(message({2, 1, "redis://h:1", ""}).find("node 1 must name the job"), std::string::npos);
}

}  // namespace
}  // namespace ntp::elastic
