#include "elastic/crash_report.h"

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <typeinfo>

namespace ntp::elastic {
namespace {

constexpr int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
constexpr int kMaxFrames = 64;

int g_rank = -1;
volatile sig_atomic_t g_reporting = 0;

// Only async-signal-safe calls from here on: write(2) and backtrace_symbols_fd.
void write_str(const char* s) {
  const ssize_t ignored = ::write(STDERR_FILENO, s, std::strlen(s));
  (void)ignored;
}

void write_int(long v) {
  char buf[24];
  int n = 0;
  const bool negative = v < 0;
  unsigned long u = negative ? static_cast<unsigned long>(-v) : static_cast<unsigned long>(v);
  do {
    buf[n++] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u != 0 && n < 22);
  if (negative) buf[n++] = '-';
  char out[24];
  for (int i = 0; i < n; ++i) out[i] = buf[n - 1 - i];
  out[n] = '\0';
  write_str(out);
}

void write_backtrace() {
  void* frames[kMaxFrames];
  const int n = ::backtrace(frames, kMaxFrames);
  write_str("backtrace (resolve with addr2line -Cfe BINARY OFFSET):\n");
  ::backtrace_symbols_fd(frames, n, STDERR_FILENO);
}

// "rank R (pid P)" for a worker, "ntp (pid P)" for any other ntp process.
void write_who() {
  if (g_rank >= 0) {
    write_str("\nrank ");
    write_int(g_rank);
    write_str(" (pid ");
  } else {
    write_str("\nntp (pid ");
  }
  write_int(::getpid());
  write_str(")");
}

void on_fatal_signal(int sig) {
  // A second fault while reporting (or a second thread) does not loop.
  if (g_reporting == 0) {
    g_reporting = 1;
    write_who();
    write_str(": fatal signal ");
    write_int(sig);
    write_str(" (");
    const char* name = sigdescr_np(sig);  // a static string: safe here, unlike strsignal
    write_str(name != nullptr ? name : "unknown");
    write_str(")\n");
    write_backtrace();
  }
  // SA_RESETHAND restored the default action: die of the same signal, so the
  // launcher reports it as it is.
  ::raise(sig);
}

void on_terminate() {
  write_who();
  write_str(": std::terminate called");
  if (const std::exception_ptr current = std::current_exception()) {
    try {
      std::rethrow_exception(current);
    } catch (const std::exception& e) {
      write_str(" after an uncaught ");
      write_str(typeid(e).name());
      write_str(": ");
      write_str(e.what());
    } catch (...) {
      write_str(" after an uncaught exception of unknown type");
    }
  } else {
    write_str(" with no active exception (a joinable std::thread destroyed, or noexcept violated)");
  }
  write_str("\n");
  write_backtrace();
  g_reporting = 1;  // the abort that follows has been reported already
  std::abort();
}

}  // namespace

void install_crash_report(int rank) {
  g_rank = rank;
  // backtrace() loads libgcc on its first call, which allocates: do it now,
  // not inside a signal handler.
  void* warm[1];
  ::backtrace(warm, 1);
  struct sigaction action {};
  action.sa_handler = on_fatal_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND | SA_NODEFER;
  for (int sig : kFatalSignals) ::sigaction(sig, &action, nullptr);
  std::set_terminate(on_terminate);
}

}  // namespace ntp::elastic
