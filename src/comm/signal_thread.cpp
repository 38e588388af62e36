#include "comm/signal_thread.h"

#include <pthread.h>
#include <unistd.h>

#include <mutex>
#include <thread>

namespace ntp::comm {

sigset_t routed_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) sigaddset(&set, sig);
  return set;
}

void route_signals_to_one_thread() {
  static std::once_flag once;
  std::call_once(once, [] {
    const sigset_t set = routed_signals();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    // Lives as long as the process: a thread that only sleeps between
    // signals, so it has nothing to finish and nothing to wait for.
    std::thread([set] {
      pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
      for (;;) ::pause();
    }).detach();
  });
}

void ignore_sigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      ::signal(SIGPIPE, SIG_IGN);
    }
  });
}

void unblock_signals_in_child() {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  // An ignored signal stays ignored across exec; a handler does not survive it.
  ::signal(SIGPIPE, SIG_DFL);
}

}  // namespace ntp::comm
