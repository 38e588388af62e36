#include "tensor/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace ntp::tensor {
namespace {

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (std::int64_t count : {0, 1, 2, 7, 100, 1001}) {
      std::vector<std::atomic<int>> hits(static_cast<std::size_t>(count));
      for (int repeat = 0; repeat < 3; ++repeat) {
        pool.parallel_for(count, 1, [&](std::int64_t b, std::int64_t e) {
          for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)]++;
        });
      }
      for (auto& h : hits) EXPECT_EQ(h.load(), 3) << "threads " << threads << " count " << count;
    }
  }
}

TEST(ThreadPool, GrainLimitsTheSplit) {
  ThreadPool pool(4);
  std::atomic<int> chunks{0};
  pool.parallel_for(100, 60, [&](std::int64_t, std::int64_t) { chunks++; });
  EXPECT_EQ(chunks.load(), 1);
}

TEST(ThreadPool, RejectsZeroThreads) { EXPECT_THROW(ThreadPool(0), std::invalid_argument); }

}  // namespace
}  // namespace ntp::tensor
