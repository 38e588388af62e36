#include "elastic/process_cpu.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace ntp::elastic {
namespace {

using namespace std::chrono_literals;

TEST(StaleWorker, StoppedZombieOrWithoutCpuIsLostStarvedIsNot) {
  const ProcessSample fresh{'S', 100};
  EXPECT_FALSE(stale_worker_lost(fresh, {'R', 101}));  // starved: runnable, had some CPU
  EXPECT_FALSE(stale_worker_lost(fresh, {'S', 250}));
  EXPECT_FALSE(stale_worker_lost(fresh, {'S', 100, 1}));  // a thread waits for a core
  EXPECT_TRUE(stale_worker_lost(fresh, {'S', 100, 0}));   // nothing runnable, no CPU since the last beat
  EXPECT_TRUE(stale_worker_lost(fresh, {'D', 100}));      // wedged in the kernel
  EXPECT_TRUE(stale_worker_lost(fresh, {'T', 900}));   // SIGSTOP
  EXPECT_TRUE(stale_worker_lost(fresh, {'t', 900}));
  EXPECT_TRUE(stale_worker_lost(fresh, {'Z', 900}));
}

// A busy child: its CPU time advances; stopped, it reads 'T' and stands still.
TEST(StaleWorker, SamplesARealProcessRunningAndStopped) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    volatile unsigned long spin = 0;
    for (;;) spin = static_cast<unsigned long>(spin) + 1;
  }
  std::this_thread::sleep_for(300ms);
  const std::optional<ProcessSample> running = sample_process(child);
  ASSERT_TRUE(running.has_value());
  std::this_thread::sleep_for(300ms);
  const std::optional<ProcessSample> later = sample_process(child);
  ASSERT_TRUE(later.has_value());
  EXPECT_GT(later->cpu_ticks, running->cpu_ticks);
  EXPECT_EQ(later->runnable_threads, 1);
  EXPECT_FALSE(stale_worker_lost(*running, *later));

  ASSERT_EQ(::kill(child, SIGSTOP), 0);
  std::this_thread::sleep_for(200ms);
  const std::optional<ProcessSample> stopped = sample_process(child);
  ASSERT_TRUE(stopped.has_value());
  EXPECT_EQ(stopped->state, 'T');
  EXPECT_EQ(stopped->runnable_threads, 0);
  EXPECT_TRUE(stale_worker_lost(*later, *stopped));

  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_FALSE(sample_process(child).has_value());  // reaped: gone
}

}  // namespace
}  // namespace ntp::elastic
