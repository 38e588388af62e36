#include "tensor/thread_pool.h"

#include <gtest/gtest.h>

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
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

// A throwing chunk (on a worker or on the caller) reaches the caller after
// every chunk finished, instead of terminating the process or leaving workers
// running a job whose function is gone; the pool is usable afterwards.
TEST(ThreadPool, ExceptionOfAnyChunkReachesTheCaller) {
  ThreadPool pool(3);
  for (const std::int64_t throwing_begin : {std::int64_t{0}, std::int64_t{20}}) {
    std::atomic<int> finished{0};
    try {
      pool.parallel_for(30, 1, [&](std::int64_t begin, std::int64_t) {
        if (begin == throwing_begin) throw std::runtime_error("chunk " + std::to_string(begin));
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        ++finished;
      });
      ADD_FAILURE() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), "chunk " + std::to_string(throwing_begin));
    }
    EXPECT_EQ(finished.load(), 2) << "returned before the other chunks finished";
  }
  std::vector<int> hits(30, 0);
  pool.parallel_for(30, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) ++hits[static_cast<std::size_t>(i)];
  });
  for (int h : hits) EXPECT_EQ(h, 1);
}

// Waits up to 10 s for the pool's workers to have slept `count` times.
bool slept(const ThreadPool& pool, std::uint64_t count) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (pool.sleeps() < count && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5 * ThreadPool::kSpin);
  return pool.sleeps() >= count;
}

// CPU seconds (user + system) of this process's threads named `name`, from
// /proc: the pool's workers alone, not the other libraries' threads (OpenBLAS
// starts its own at load, and they spin for a while).
double thread_cpu_seconds(const std::string& name) {
  double ticks = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string comm_name;
    std::getline(comm, comm_name);
    if (comm_name != name) continue;
    std::ifstream stat_file(task.path() / "stat");
    std::string stat;
    std::getline(stat_file, stat);
    std::istringstream fields(stat.substr(stat.rfind(')') + 2));  // after "pid (comm) "
    std::string field;
    for (int i = 3; i <= 15; ++i) {  // fields 14 and 15: utime, stime
      fields >> field;
      if (i >= 14) ticks += std::stod(field);
    }
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// An idle worker spins for at most kSpin, then sleeps, and a sleeping worker
// is woken for the next job: a pool left without work holds no core.
TEST(ThreadPool, AnIdleWorkerSleepsAndWakesForTheNextJob) {
  ThreadPool pool(2);
  ASSERT_TRUE(slept(pool, 1)) << "the new worker was still spinning after 10 s";
  std::atomic<int> ran{0};
  pool.parallel_for(2, 1, [&](std::int64_t, std::int64_t) { ++ran; });
  ASSERT_TRUE(slept(pool, 2)) << "the worker was still spinning 10 s after its job";
  const double cpu0 = thread_cpu_seconds(ThreadPool::kWorkerName);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_LT(thread_cpu_seconds(ThreadPool::kWorkerName) - cpu0, 0.1) << "an idle pool worker used CPU time";
  pool.parallel_for(2, 1, [&](std::int64_t, std::int64_t) { ++ran; });
  EXPECT_EQ(ran.load(), 4);
}

// The measurement above sees a thread of that name that spins.
TEST(ThreadPool, TheIdleCheckSeesASpinningThread) {
  std::atomic<double> before{-1};
  std::thread spinner([&] {
    pthread_setname_np(pthread_self(), ThreadPool::kWorkerName);
    before = thread_cpu_seconds(ThreadPool::kWorkerName);
    const auto own_cpu = [] {  // this thread's CPU time, whatever the load
      timespec ts{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
    };
    const double start = own_cpu();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (own_cpu() - start < 0.3 && std::chrono::steady_clock::now() < deadline) {
    }
    EXPECT_GE(thread_cpu_seconds(ThreadPool::kWorkerName) - before, 0.2) << "a spinning thread went unseen";
  });
  spinner.join();
}

TEST(ThreadPool, RejectsZeroThreads) { EXPECT_THROW(ThreadPool(0), std::invalid_argument); }

}  // namespace
}  // namespace ntp::tensor
