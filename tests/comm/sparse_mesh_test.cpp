// Sparse Gloo groups (GroupOptions::sparse): the peer sets, the three calls
// they carry against a local reference, the calls they refuse, and an abort
// with a call in flight on a mesh that lacks most pairs.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include <gloo/transport/tcp/address.h>

#include "comm/gloo_mesh.h"
#include "comm/rendezvous.h"
#include "tests/comm/collective_checks.h"
#include "tests/comm/thread_ranks.h"

namespace ntp::comm {
namespace {

using namespace std::chrono_literals;

// The pairs Gloo's ring and dissemination barrier use: rank +- 1 and rank + 2^k.
std::set<int> pairs_gloo_needs(int rank, int size) {
  std::set<int> needed;
  for (int d = 1; d < size; d *= 2) {
    needed.insert((rank + d) % size);
    needed.insert((rank - d + size) % size);
  }
  needed.erase(rank);
  return needed;
}

TEST(MeshPeers, SparseSetsAreSymmetricSortedSmallAndHoldWhatGlooUses) {
  for (int size = 1; size <= 300; ++size) {
    std::size_t most = 0;
    for (int rank = 0; rank < size; ++rank) {
      const std::vector<int> peers = mesh_peers(rank, size, true);
      ASSERT_TRUE(std::is_sorted(peers.begin(), peers.end())) << rank << "/" << size;
      ASSERT_EQ(std::set<int>(peers.begin(), peers.end()), pairs_gloo_needs(rank, size)) << rank << "/" << size;
      for (int peer : peers) {
        const std::vector<int> back = mesh_peers(peer, size, true);
        ASSERT_TRUE(std::binary_search(back.begin(), back.end(), rank)) << rank << " -> " << peer << " of " << size;
      }
      most = std::max(most, peers.size());
    }
    int log2_ceil = 0;
    while ((1 << log2_ceil) < size) ++log2_ceil;
    EXPECT_LE(most, static_cast<std::size_t>(2 * log2_ceil)) << size;
  }
}

TEST(MeshPeers, FullMeshIsEveryOtherRank) {
  EXPECT_EQ(mesh_peers(2, 5, false), (std::vector<int>{0, 1, 3, 4}));
  EXPECT_TRUE(mesh_peers(0, 1, false).empty());
  EXPECT_EQ(mesh_peers(0, 144, false).size(), 143u);
  // 1, 2, 4, ..., 128 either way is 16 ranks, of which 16 and 128 are reached both ways.
  EXPECT_EQ(mesh_peers(0, 144, true).size(), 14u);
}

void run_sparse(int size, const std::string& name, const std::function<void(Group&)>& body,
                std::shared_ptr<Store> store = nullptr) {
  testing::TempStoreDir dir;
  if (!store) store = open_store(dir.spec());
  testing::rethrow_first(testing::run_threads(size, [&](int rank) {
    GroupOptions opts = testing::group_options(size, rank, name);
    opts.sparse = true;
    auto group = create_group(store, opts);
    body(*group);
  }));
}

void check_carried_calls(Group& g) {
  testing::check_all_reduce(g, 1000);
  testing::check_all_gather(g);
  testing::check_barrier(g);
  testing::check_all_reduce(g, 100000);  // many ring segments
}

class SparseGroup : public ::testing::TestWithParam<int> {};

TEST_P(SparseGroup, AllReduceAllGatherAndBarrierMatchTheReference) {
  run_sparse(GetParam(), "sparse", check_carried_calls);
}

INSTANTIATE_TEST_SUITE_P(GroupSize, SparseGroup, ::testing::Values(1, 2, 3, 5, 8, 13, 33));

// The records hold one address per peer, so each rank made only those pairs.
TEST(SparseGroup, EachRankPublishesOnlyItsPeersAddresses) {
  const int size = 33;
  testing::TempStoreDir dir;
  auto store = open_store(dir.spec());
  run_sparse(size, "count", [](Group& g) { g.barrier(); }, store);
  const std::size_t width = gloo::transport::tcp::Address().bytes().size();
  for (int rank = 0; rank < size; ++rank) {
    const auto record = store->get(mesh_key(group_prefix(1, "count"), rank), 5s);
    EXPECT_EQ(record.size(), mesh_peers(rank, size, true).size() * width) << "rank " << rank;
    EXPECT_LT(record.size(), static_cast<std::size_t>(size - 1) * width) << "rank " << rank;
  }
}

TEST(SparseGroup, RefusesCallsThatNeedAFullMeshAndStaysUsable) {
  run_sparse(5, "refuse", [](Group& g) {
    std::vector<float> data(4, 1.0f);
    const std::vector<std::size_t> counts(5, 1);
    std::vector<float> one(1);
    std::vector<float> five(5);
    auto expect_refused = [&](const char* op, const std::function<void()>& call) {
      try {
        call();
        ADD_FAILURE() << op << " ran on a sparse group";
      } catch (const CommError& e) {
        EXPECT_EQ(e.kind(), CommErrorKind::kBadInput) << op << ": " << e.what();
        EXPECT_NE(std::string(e.what()).find("sparse"), std::string::npos) << e.what();
      }
    };
    expect_refused("broadcast", [&] { g.broadcast(data, 0); });
    expect_refused("reduce_scatter", [&] { g.reduce_scatter(std::vector<float>(5, 1.0f), one, counts); });
    expect_refused("all_gather_v", [&] { g.all_gather_v(std::vector<float>(1), five, counts); });
    expect_refused("all_to_all_v", [&] { g.all_to_all_v(std::vector<float>(5), counts, five, counts); });
    EXPECT_FALSE(g.broken());
    check_carried_calls(g);
  });
}

// Point-to-point runs between connected members: ring neighbours and the
// pairs in GroupOptions::links. Ranks 0 and 3 of 9 are not ring peers (0's
// are 1, 2, 4, 5, 7, 8); linked they trade, and 0 -> 6 is refused before any
// data moves, leaving the group usable.
TEST(SparseGroup, PointToPointRunsBetweenConnectedMembersOnly) {
  const int size = 9;
  EXPECT_EQ(mesh_peers(0, size, true), (std::vector<int>{1, 2, 4, 5, 7, 8}));
  EXPECT_EQ(mesh_peers(0, size, true, {{3, 0}}), (std::vector<int>{1, 2, 3, 4, 5, 7, 8}));
  EXPECT_EQ(mesh_peers(3, size, true, {{3, 0}}), (std::vector<int>{0, 1, 2, 4, 5, 7, 8}));
  testing::TempStoreDir dir;
  auto store = open_store(dir.spec());
  testing::rethrow_first(testing::run_threads(size, [&](int rank) {
    GroupOptions opts = testing::group_options(size, rank, "links");
    opts.sparse = true;
    opts.links = {{3, 0}};
    auto g = create_group(store, opts);
    std::vector<float> value(100, static_cast<float>(rank));
    if (rank == 0) {
      g->send(value, 3, 1);
      try {
        g->send(value, 6, 2);
        ADD_FAILURE() << "a send to an unconnected member ran";
      } catch (const CommError& e) {
        EXPECT_EQ(e.kind(), CommErrorKind::kBadInput) << e.what();
        EXPECT_NE(std::string(e.what()).find("GroupOptions::links"), std::string::npos) << e.what();
      }
      EXPECT_FALSE(g->broken());
    }
    if (rank == 3) {
      g->recv(value, 0, 1);
      EXPECT_EQ(value[99], 0.0f);
    }
    // Ring neighbours trade both ways in one exchange.
    std::vector<float> from_left(10), mine(10, static_cast<float>(rank));
    g->exchange({P2POp::send(mine, (rank + 1) % size, 3), P2POp::recv(from_left, (rank + size - 1) % size, 3)});
    EXPECT_EQ(from_left[9], static_cast<float>((rank + size - 1) % size));
    check_carried_calls(*g);
  }));
}

// An abort must skip the pairs a sparse mesh never made (rank 3 of 9 has
// none with rank 0, where its loop over the pairs starts). Rank 0 stays out of
// the all-reduce, so the others block until their groups are aborted, as a
// trainer does on every member when an epoch fails.
TEST(SparseGroup, AbortWakesTheCallsInFlight) {
  const int size = 9;
  testing::TempStoreDir dir;
  auto store = open_store(dir.spec());
  std::vector<std::unique_ptr<Group>> groups(size);
  std::atomic<int> created{0};
  std::atomic<int> finished{0};
  std::thread aborter([&] {
    while (created < size) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(200ms);
    for (int rank = size - 1; rank >= 1; --rank) groups[static_cast<std::size_t>(rank)]->abort("test");
  });
  testing::rethrow_first(testing::run_threads(size, [&](int rank) {
    GroupOptions opts = testing::group_options(size, rank, "abort", 1, 30s);
    opts.sparse = true;
    groups[static_cast<std::size_t>(rank)] = create_group(store, opts);
    ++created;
    if (rank == 0) {
      while (finished < size - 1) std::this_thread::sleep_for(1ms);
      return;
    }
    std::vector<float> data(10, 1.0f);
    const auto start = std::chrono::steady_clock::now();
    try {
      groups[static_cast<std::size_t>(rank)]->all_reduce(data.data(), data.size());
      ADD_FAILURE() << "rank " << rank << ": all_reduce returned without rank 0";
    } catch (const CommError& e) {
      EXPECT_LT(std::chrono::steady_clock::now() - start, 10s) << "rank " << rank << " waited: " << e.what();
    }
    ++finished;
  }));
  aborter.join();
}

}  // namespace
}  // namespace ntp::comm
