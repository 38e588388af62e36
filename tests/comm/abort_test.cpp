// Giving up early, with ranks as threads over loopback Gloo and deadlines of
// 10 s: abort() from another thread frees a call blocked in Gloo within a
// second (not at the deadline), the aborting rank's peer fails as fast, and
// the group is destroyed at once afterwards.
#include <gtest/gtest.h>

#include <future>
#include <iostream>
#include <thread>

#include "tests/comm/thread_ranks.h"

namespace ntp::comm {
namespace {

using namespace std::chrono_literals;
using testing::group_options;
using testing::run_threads;
using testing::TempStoreDir;
using clock_type = std::chrono::steady_clock;

double seconds_between(clock_type::time_point from, clock_type::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

void report(const std::string& what, double seconds) {
  std::cout << "[ latency ] " << what << ": " << static_cast<long long>(seconds * 1000.0) << " ms" << std::endl;
}

// Rank 1 never calls all_reduce; rank 0 blocks in it until a watchdog thread
// aborts the group.
TEST(Abort, FreesACallBlockedInGlooOnAnotherThread) {
  TempStoreDir dir;
  auto store = open_store(dir.spec());
  std::promise<void> rank0_done;
  auto rank0_finished = rank0_done.get_future();
  clock_type::time_point aborted_at, failed_at, destroyed_at;
  auto errors = run_threads(2, [&](int rank) {
    auto g = create_group(store, group_options(2, rank, "abort-blocked", 1, 10s));
    if (rank == 1) {
      rank0_finished.wait_for(30s);  // keeps its end open, never calls
      return;
    }
    std::thread watchdog([&] {
      std::this_thread::sleep_for(200ms);
      aborted_at = clock_type::now();
      g->abort("watchdog: rank 1 is stale");
    });
    std::vector<float> x(1000, 1.0f);
    try {
      g->all_reduce(x.data(), x.size());
      ADD_FAILURE() << "all_reduce returned without rank 1";
    } catch (const CommError& e) {
      failed_at = clock_type::now();
      EXPECT_EQ(e.kind(), CommErrorKind::kBroken) << e.what();
      EXPECT_NE(std::string(e.what()).find("watchdog: rank 1 is stale"), std::string::npos) << e.what();
    }
    watchdog.join();
    g.reset();
    destroyed_at = clock_type::now();
    rank0_done.set_value();
  });
  testing::rethrow_first(errors);
  report("abort -> blocked all_reduce fails", seconds_between(aborted_at, failed_at));
  report("abort -> group destroyed", seconds_between(aborted_at, destroyed_at));
  EXPECT_LT(seconds_between(aborted_at, failed_at), 1.0);
  EXPECT_LT(seconds_between(aborted_at, destroyed_at), 1.0);
}

// Rank 1 blocks in all_reduce on rank 0, which never calls it but aborts.
TEST(Abort, ThePeerOfAnAbortingRankFailsFast) {
  TempStoreDir dir;
  auto store = open_store(dir.spec());
  std::promise<void> rank1_done;
  auto rank1_finished = rank1_done.get_future();
  clock_type::time_point aborted_at, failed_at;
  auto errors = run_threads(2, [&](int rank) {
    auto g = create_group(store, group_options(2, rank, "abort-peer", 1, 10s));
    std::vector<float> x(1000, 1.0f);
    if (rank == 0) {
      std::this_thread::sleep_for(200ms);
      aborted_at = clock_type::now();
      std::thread([&] { g->abort("watchdog: leaving"); }).join();
      try {
        g->all_reduce(x.data(), x.size());
        ADD_FAILURE() << "aborted group still ran";
      } catch (const CommError& e) {
        EXPECT_EQ(e.kind(), CommErrorKind::kBroken) << e.what();
      }
      rank1_finished.wait_for(30s);
      return;
    }
    try {
      g->all_reduce(x.data(), x.size());
      ADD_FAILURE() << "all_reduce returned without rank 0";
    } catch (const CommError& e) {
      failed_at = clock_type::now();
      EXPECT_EQ(e.kind(), CommErrorKind::kConnectionClosed) << e.what();
    }
    rank1_done.set_value();
  });
  testing::rethrow_first(errors);
  report("abort -> the peer's all_reduce fails", seconds_between(aborted_at, failed_at));
  EXPECT_LT(seconds_between(aborted_at, failed_at), 1.0);
}

// The trainer's pattern: the call runs on the group's thread, the watchdog
// aborts from the main thread, and destroying the group drains the thread.
TEST(Abort, FreesAnAsyncCallAndTheGroupIsDestroyed) {
  TempStoreDir dir;
  auto store = open_store(dir.spec());
  std::promise<void> rank0_done;
  auto rank0_finished = rank0_done.get_future();
  clock_type::time_point aborted_at, failed_at, destroyed_at;
  auto errors = run_threads(2, [&](int rank) {
    auto g = create_group(store, group_options(2, rank, "abort-async", 1, 10s));
    if (rank == 1) {
      rank0_finished.wait_for(30s);
      return;
    }
    std::vector<double> x(1 << 16, 1.0);
    auto work = g->all_reduce_async(x.data(), x.size());
    std::this_thread::sleep_for(200ms);
    EXPECT_FALSE(work->done());
    aborted_at = clock_type::now();
    g->abort("watchdog: rank 1 is stale");
    try {
      work->wait();
      ADD_FAILURE() << "async all_reduce completed without rank 1";
    } catch (const CommError& e) {
      failed_at = clock_type::now();
      EXPECT_EQ(e.kind(), CommErrorKind::kBroken) << e.what();
    }
    g.reset();
    destroyed_at = clock_type::now();
    rank0_done.set_value();
  });
  testing::rethrow_first(errors);
  report("abort -> async all_reduce fails", seconds_between(aborted_at, failed_at));
  EXPECT_LT(seconds_between(aborted_at, failed_at), 1.0);
  EXPECT_LT(seconds_between(aborted_at, destroyed_at), 1.0);
}

}  // namespace
}  // namespace ntp::comm
