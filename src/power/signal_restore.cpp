// SignalRestore (see signal_restore.h): self-pipe signal handler plus a
// watcher thread that does the non-signal-safe work.
#include "power/signal_restore.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <mutex>

#include <fmt/format.h>

namespace ntp::power {
namespace {

// The write end of the active SignalRestore's pipe; -1 when none is active.
std::atomic<int> g_signal_fd{-1};
// Serialises uninstall() between the watcher thread and the destructor.
std::mutex g_install_mutex;

constexpr unsigned char kStopByte = 0;

extern "C" void on_restore_signal(int signo) {
  const int saved_errno = errno;
  const int fd = g_signal_fd.load();
  if (fd >= 0) {
    const unsigned char byte = static_cast<unsigned char>(signo);
    [[maybe_unused]] const ssize_t written = ::write(fd, &byte, 1);
  }
  errno = saved_errno;
}

}  // namespace

SignalRestore::SignalRestore(LimitGuard& guard, std::vector<int> signals)
    : guard_(guard), signals_(std::move(signals)) {
  if (::pipe2(pipe_, O_CLOEXEC) != 0) {
    throw PowerError(fmt::format("power: cannot create the signal pipe: errno {}", errno));
  }
  // Never block the handler, even if signals pile up.
  ::fcntl(pipe_[1], F_SETFL, ::fcntl(pipe_[1], F_GETFL) | O_NONBLOCK);
  int expected = -1;
  if (!g_signal_fd.compare_exchange_strong(expected, pipe_[1])) {
    ::close(pipe_[0]);
    ::close(pipe_[1]);
    throw PowerError("power: a SignalRestore is already active in this process");
  }
  {
    std::lock_guard lock(g_install_mutex);
    struct sigaction action {};
    action.sa_handler = on_restore_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    previous_.resize(signals_.size());
    for (std::size_t i = 0; i < signals_.size(); ++i) {
      ::sigaction(signals_[i], &action, &previous_[i]);
    }
  }
  try {
    watcher_ = std::thread([this] { watch(); });
  } catch (...) {
    uninstall();
    g_signal_fd.store(-1);
    ::close(pipe_[0]);
    ::close(pipe_[1]);
    throw;
  }
}

SignalRestore::~SignalRestore() {
  const unsigned char stop = kStopByte;
  [[maybe_unused]] const ssize_t written = ::write(pipe_[1], &stop, 1);
  watcher_.join();
  uninstall();
  g_signal_fd.store(-1);
  ::close(pipe_[0]);
  ::close(pipe_[1]);
}

void SignalRestore::uninstall() {
  std::lock_guard lock(g_install_mutex);
  for (std::size_t i = 0; i < previous_.size(); ++i) {
    ::sigaction(signals_[i], &previous_[i], nullptr);
  }
  previous_.clear();
}

void SignalRestore::watch() {
  unsigned char byte = kStopByte;
  for (;;) {
    const ssize_t got = ::read(pipe_[0], &byte, 1);
    if (got == 1) break;
    if (got < 0 && errno == EINTR) continue;
    return;  // pipe closed: nothing left to watch
  }
  if (byte == kStopByte) return;
  try {
    guard_.restore_all();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ntp power: could not restore power limits on signal %d: %s\n", byte,
                 e.what());
  }
  // Let the signal do what it would have done without us.
  uninstall();
  ::kill(::getpid(), byte);
}

}  // namespace ntp::power
