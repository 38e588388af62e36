#pragma once
// SignalRestore: restores a LimitGuard's limits when the process receives
// SIGTERM or SIGINT, then lets the signal take its previous course (the
// default terminates the process; a handler installed before is called).
//
// Signal-safe by construction: NVML calls are not async-signal-safe, so the
// handler only write()s the signal number to a pipe (the self-pipe pattern).
// A thread owned by SignalRestore reads it, calls guard.restore_all(),
// reinstalls the previous dispositions and re-sends the signal to the process.
// Limits are restored even if the main thread is blocked in a collective.
//
// One SignalRestore at a time per process. Install it after any other handler
// of these signals, so that it is the one that chains. Destroy it before the
// guard it watches.
#include <csignal>
#include <thread>
#include <vector>

#include "power/limit_guard.h"

namespace ntp::power {

class SignalRestore {
 public:
  explicit SignalRestore(LimitGuard& guard, std::vector<int> signals = {SIGTERM, SIGINT});
  // Stops the thread and reinstalls the previous dispositions.
  ~SignalRestore();
  SignalRestore(const SignalRestore&) = delete;
  SignalRestore& operator=(const SignalRestore&) = delete;

 private:
  void watch();
  void uninstall();

  LimitGuard& guard_;
  std::vector<int> signals_;
  std::vector<struct sigaction> previous_;
  int pipe_[2] = {-1, -1};
  std::thread watcher_;
};

}  // namespace ntp::power
