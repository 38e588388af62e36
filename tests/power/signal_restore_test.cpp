// SIGTERM restores the limits: through the self-pipe thread, before the signal
// goes on to the handler that was installed before, or to the default action.
#include "power/signal_restore.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "power/simulated_controller.h"

namespace ntp::power {
namespace {

const DevicePowerModel kModel{1000.0, 1.3, 0.65};

std::atomic<int> g_previous_handler_saw{0};
extern "C" void previous_handler(int signo) { g_previous_handler_saw.store(signo); }

bool wait_for(const std::atomic<int>& flag, std::chrono::seconds deadline) {
  const auto end = std::chrono::steady_clock::now() + deadline;
  while (flag.load() == 0) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST(SignalRestore, SigtermRestoresLimitsThenChainsToThePreviousHandler) {
  struct sigaction test_action {};
  struct sigaction original {};
  test_action.sa_handler = previous_handler;
  sigemptyset(&test_action.sa_mask);
  ASSERT_EQ(sigaction(SIGTERM, &test_action, &original), 0);
  g_previous_handler_saw.store(0);

  SimulatedPowerController sim(2, kModel);
  {
    LimitGuard guard(sim);
    SignalRestore on_signal(guard);
    guard.set_limit_w(0, 1250.0);
    guard.set_limit_w(1, 1100.0);
    ASSERT_EQ(kill(getpid(), SIGTERM), 0);
    ASSERT_TRUE(wait_for(g_previous_handler_saw, std::chrono::seconds(10)));
    EXPECT_EQ(g_previous_handler_saw.load(), SIGTERM);
    // Restored by the signal path, before the guard's destructor ran.
    EXPECT_EQ(sim.get_limit_w(0), 1000.0);
    EXPECT_EQ(sim.get_limit_w(1), 1000.0);
    EXPECT_TRUE(guard.changed_devices().empty());
  }
  sigaction(SIGTERM, &original, nullptr);
}

TEST(SignalRestore, OnlyOneAtATime) {
  SimulatedPowerController sim(1, kModel);
  LimitGuard guard(sim);
  SignalRestore first(guard, {SIGUSR1});
  EXPECT_THROW(SignalRestore second(guard, {SIGUSR2}), PowerError);
}

TEST(SignalRestore, UninstallsItsHandlerWhenDestroyed) {
  struct sigaction before {};
  sigaction(SIGUSR1, nullptr, &before);
  SimulatedPowerController sim(1, kModel);
  LimitGuard guard(sim);
  { SignalRestore on_signal(guard, {SIGUSR1}); }
  struct sigaction after {};
  sigaction(SIGUSR1, nullptr, &after);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
}

// A device that says when it is set, so a child process can show on stderr
// that the restore happened before SIGTERM's default action killed it.
class LoudSimulatedController final : public PowerController {
 public:
  LoudSimulatedController() : sim_(1, kModel) {}
  std::string backend() const override { return sim_.backend(); }
  int device_count() const override { return sim_.device_count(); }
  std::string device_name(int device) const override { return sim_.device_name(device); }
  LimitRange limit_range(int device) const override { return sim_.limit_range(device); }
  double default_limit_w(int device) const override { return sim_.default_limit_w(device); }
  double get_limit_w(int device) const override { return sim_.get_limit_w(device); }
  void set_limit_w(int device, double watts) override {
    sim_.set_limit_w(device, watts);
    std::fprintf(stderr, "device %d set to %.0f W\n", device, watts);
  }
  double power_usage_w(int device) const override { return sim_.power_usage_w(device); }

 private:
  SimulatedPowerController sim_;
};

void boost_then_sigterm() {
  LoudSimulatedController loud;
  LimitGuard guard(loud);
  SignalRestore on_signal(guard);
  guard.set_limit_w(0, 1200.0);
  kill(getpid(), SIGTERM);
  std::this_thread::sleep_for(std::chrono::seconds(10));  // killed long before
  std::fprintf(stderr, "still alive\n");
  std::exit(0);
}

TEST(SignalRestoreDeathTest, DefaultSigtermStillTerminatesAfterRestoring) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(boost_then_sigterm(), testing::KilledBySignal(SIGTERM),
              "device 0 set to 1200 W\ndevice 0 set to 1000 W");
}

}  // namespace
}  // namespace ntp::power
