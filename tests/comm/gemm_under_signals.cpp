// Runs the same GEMMs over and over on a 2-thread context while the test
// signals this process; exits 0 if every result equals the first bit for
// bit, 1 if one differs. argv[1]: "routed" (the product's setup: signals
// go to one thread) or "anywhere" (a handler may run on any thread).
// argv[2]: seconds to run.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "comm/signal_thread.h"
#include "tensor/context.h"
#include "tensor/matmul.h"

namespace {
volatile sig_atomic_t g_signals = 0;
void count_signal(int) { g_signals = g_signals + 1; }
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const bool routed = std::string(argv[1]) == "routed";
  if (routed) ntp::comm::route_signals_to_one_thread();
  struct sigaction action {};
  action.sa_handler = count_signal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGUSR2, &action, nullptr);

  ntp::tensor::Context ctx({.threads = 2, .gemm = ntp::tensor::GemmBackend::kOneDnn});
  // Shapes like a small model's layers; each call allocates and frees
  // oneDNN scratch, where a clobbered heap shows.
  const long m = 256, n = 768, k = 768;
  std::vector<float> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n));
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f - 0.5f;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>((i * 104729) % 1000) / 1000.0f - 0.5f;
  std::vector<float> first(static_cast<std::size_t>(m * n)), c(first.size());
  ntp::tensor::gemm(ctx, false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, first.data(), n);
  std::printf("ready\n");
  std::fflush(stdout);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(std::atof(argv[2]));
  long calls = 0;
  while (std::chrono::steady_clock::now() < end) {
    ntp::tensor::gemm(ctx, false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
    ++calls;
    if (std::memcmp(c.data(), first.data(), c.size() * sizeof(float)) != 0) {
      std::printf("call %ld differs from the first\n", calls);
      std::fflush(stdout);
      return 1;
    }
  }
  std::printf("%ld calls, %d signals\n", calls, static_cast<int>(g_signals));
  std::fflush(stdout);
  return 0;
}
