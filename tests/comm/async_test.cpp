// Asynchronous operations: bucketed all-reduces overlap with the caller's
// work, complete in issue order, and report errors through Work::wait().
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "tests/comm/thread_ranks.h"

namespace ntp::comm {
namespace {

using namespace std::chrono_literals;
using testing::group_options;
using testing::run_group;
using testing::run_threads;

TEST(Async, BucketedAllReducesWhileComputing) {
  run_group(4, "dp", [](Group& g) {
    constexpr int kBuckets = 8;
    std::vector<std::vector<float>> buckets(kBuckets);
    std::vector<std::shared_ptr<Work>> pending;
    for (int b = 0; b < kBuckets; ++b) {
      buckets[static_cast<std::size_t>(b)].assign(10000 + static_cast<std::size_t>(b), static_cast<float>(g.rank() + b));
      pending.push_back(g.all_reduce_async(buckets[static_cast<std::size_t>(b)].data(), buckets[static_cast<std::size_t>(b)].size()));
    }
    // The caller keeps going (backward of earlier layers) while buckets move.
    volatile double sink = 0;
    for (int i = 0; i < 100000; ++i) sink = sink + i * 0.5;
    for (auto& w : pending) w->wait();
    for (int b = 0; b < kBuckets; ++b) {
      for (float x : buckets[static_cast<std::size_t>(b)]) ASSERT_EQ(x, static_cast<float>(6 + 4 * b));
    }
  });
}

TEST(Async, BlockingCallWaitsForQueuedWork) {
  run_group(3, "order", [](Group& g) {
    std::vector<double> a(50000, 1.0), b(7, 2.0);
    auto w = g.all_reduce_async(a.data(), a.size());
    g.all_reduce(b.data(), b.size());  // runs after `a` on every rank
    EXPECT_TRUE(w->done());
    w->wait();
    EXPECT_EQ(a[0], 3.0);
    EXPECT_EQ(b[0], 6.0);
  });
}

TEST(Async, TaskCanRunSeveralOperations) {
  run_group(2, "task", [](Group& g) {
    std::vector<float> x(10, static_cast<float>(g.rank() + 1)), all(20);
    auto w = g.run_async([&](Group& gg) {
      gg.all_reduce(x.data(), x.size());
      gg.all_gather(x, all);
    });
    w->wait();
    EXPECT_EQ(all[19], 3.0f);
  });
}

// A task that issues an asynchronous operation of its own group and waits
// for it (e.g. a gradient hook running inside run_async) must not wait for
// itself: the nested operation runs at once, as nested blocking calls do.
// On a deadlock the group is leaked so the test fails instead of hanging.
TEST(Async, TaskWaitingOnItsOwnGroupsAsyncWorkDoesNotDeadlock) {
  testing::TempStoreDir dir;
  auto group = create_group(open_store(dir.spec()), group_options(1, 0, "nested"));
  std::vector<float> x(100, 2.0f);
  auto outer = group->run_async([&](Group& g) {
    g.all_reduce_async(x.data(), x.size())->wait();
    g.run_async([&](Group&) { x[0] = 7.0f; })->wait();
  });
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!outer->done() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  if (!outer->done()) {
    static_cast<void>(group.release());  // its worker is stuck; don't join it
    FAIL() << "a task waiting on work of its own group deadlocked";
  }
  outer->wait();
  EXPECT_EQ(x[0], 7.0f);
  EXPECT_EQ(x[1], 2.0f);
}

TEST(Async, TwoGroupsOfOneRankRunConcurrently) {
  testing::TempStoreDir dir;
  auto store = open_store(dir.spec());
  testing::rethrow_first(run_threads(2, [&](int rank) {
    auto tp = create_group(store, group_options(2, rank, "tp"));
    auto dp = create_group(store, group_options(2, rank, "dp"));
    std::vector<float> grads(200000, 1.0f);
    auto w = dp->all_reduce_async(grads.data(), grads.size());
    for (int i = 0; i < 20; ++i) {  // TP traffic of the next layers meanwhile
      std::vector<float> act(64, 1.0f);
      tp->all_reduce(act.data(), act.size());
      ASSERT_EQ(act[0], 2.0f);
    }
    w->wait();
    EXPECT_EQ(grads.back(), 2.0f);
  }));
}

TEST(Async, ErrorSurfacesThroughWait) {
  testing::TempStoreDir dir;
  auto store = open_store(dir.spec());
  auto errors = run_threads(2, [&](int rank) {
    auto g = create_group(store, group_options(2, rank, "err", 1, 800ms));
    std::vector<float> data(100, 1.0f);
    if (rank == 0) {
      auto first = g->all_reduce_async(data.data(), data.size());
      auto second = g->all_reduce_async(data.data(), data.size());
      EXPECT_THROW(first->wait(), CommError);
      try {
        second->wait();
        ADD_FAILURE() << "second operation of a broken group succeeded";
      } catch (const CommError& e) {
        EXPECT_EQ(e.kind(), CommErrorKind::kBroken);
      }
    } else {
      std::this_thread::sleep_for(1500ms);  // never joins the collective in time
    }
  });
  testing::rethrow_first(errors);
}

}  // namespace
}  // namespace ntp::comm
