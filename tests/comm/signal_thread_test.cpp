// Asynchronous signals reach one thread only (comm/signal_thread.h): a handler
// never runs on a compute thread, and a program started by this process gets
// an unblocked mask.
#include <gtest/gtest.h>

#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "comm/child_process.h"
#include "comm/signal_thread.h"

namespace {

std::atomic<pid_t> g_handler_tid{0};
void record_thread(int) { g_handler_tid = static_cast<pid_t>(::syscall(SYS_gettid)); }

bool blocked_here(int sig) {
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  return sigismember(&mask, sig) == 1;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(SignalThread, AProcessSignalRunsItsHandlerOnTheSignalThreadOnly) {
  ntp::comm::route_signals_to_one_thread();
  ntp::comm::route_signals_to_one_thread();  // idempotent
  EXPECT_TRUE(blocked_here(SIGINT));
  EXPECT_TRUE(blocked_here(SIGTERM));
  bool blocked_in_new_thread = false;
  std::thread([&] { blocked_in_new_thread = blocked_here(SIGUSR1); }).join();
  EXPECT_TRUE(blocked_in_new_thread) << "a thread started later must inherit the block";

  struct sigaction action {}, previous {};
  action.sa_handler = record_thread;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGUSR1, &action, &previous);
  g_handler_tid = 0;
  ::kill(::getpid(), SIGUSR1);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (g_handler_tid == 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ::sigaction(SIGUSR1, &previous, nullptr);
  ASSERT_NE(g_handler_tid.load(), 0) << "the handler did not run within 5 s";
  EXPECT_NE(g_handler_tid.load(), static_cast<pid_t>(::syscall(SYS_gettid)));
}

TEST(SignalThread, AChildStartsWithNothingBlocked) {
  ntp::comm::route_signals_to_one_thread();
  const std::string log = ::testing::TempDir() + "signal_thread_child.log";
  ntp::comm::ChildProcess child({"/bin/sh", "-c", "grep SigBlk /proc/self/status"}, {}, log);
  const std::optional<int> status = child.wait_for(std::chrono::seconds(10));
  ASSERT_TRUE(status.has_value()) << "the child did not exit within 10 s";
  EXPECT_NE(read_file(log).find("0000000000000000"), std::string::npos) << read_file(log);
}

// Signals a GEMM loop every millisecond; returns its wait status, or nothing
// if it did not end within `seconds` + 30 (it is then killed).
std::optional<int> bombard(const std::string& mode, double seconds) {
  const std::string log = ::testing::TempDir() + "gemm_under_signals_" + mode + ".log";
  ntp::comm::ChildProcess child({NTP_GEMM_UNDER_SIGNALS, mode, std::to_string(seconds)}, {}, log);
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds + 30);
  std::optional<int> status;
  // Its handler is installed once it prints "ready"; a signal before would kill it.
  while (!status && read_file(log).find("ready") == std::string::npos && std::chrono::steady_clock::now() < until) {
    status = child.wait_for(std::chrono::milliseconds(5));
  }
  while (!status && std::chrono::steady_clock::now() < until) {
    child.signal(SIGUSR2);
    status = child.wait_for(std::chrono::milliseconds(1));
  }
  std::printf("%s: %s", mode.c_str(), read_file(log).c_str());
  return status;
}

TEST(SignalThread, GemmsUnderASignalStormStayExact) {
  const std::optional<int> status = bombard("routed", 3.0);
  ASSERT_TRUE(status.has_value()) << "the GEMM loop did not end within 33 s";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "status " << *status;
}

// The hazard the routing removes: with handlers allowed on every thread the
// same storm corrupts oneDNN's heap or its results on this machine. Whether it
// strikes within the time given depends on the CPU and the library build, so
// a clean run is reported, not failed (a struck run ends early).
TEST(SignalThread, WithoutRoutingTheStormIsAHazard) {
  const std::optional<int> status = bombard("anywhere", 8.0);
  if (status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) {
    GTEST_SKIP() << "no corruption seen in 8 s without routing on this machine";
  }
  // An abort, a wrong result, or a hang (a corrupted heap can deadlock too).
  SUCCEED() << "without routing: " << (status ? "status " + std::to_string(*status) : std::string("hung"));
}

}  // namespace
