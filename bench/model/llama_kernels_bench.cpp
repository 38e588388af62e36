// The RMSNorm kernels (forward and backward) against the plain
// loops they replaced (tensor::reference), alternated call by call in one
// process so both see the same machine load; reports each one's time per call
// and reference / fast. Shapes of llama-small and llama-1b at batch 4 x
// sequence 128 (n = 512 rows).
//
//   llama_kernels_bench [--threads=N] [benchmark flags]
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench/support/host_load.h"
#include "tensor/context.h"
#include "tensor/rmsnorm.h"

namespace {

using namespace ntp;

int g_threads = 2;

std::vector<float> random_vector(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Times `fast` and `reference` alternately, one call each per iteration.
void side_by_side(benchmark::State& state, const std::function<void()>& fast, const std::function<void()>& reference) {
  double fast_s = 0.0, reference_s = 0.0;
  const auto time = [](const std::function<void()>& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  fast();
  reference();  // warm up
  for (auto _ : state) {
    fast_s += time(fast);
    reference_s += time(reference);
  }
  const auto n = static_cast<double>(state.iterations());
  state.counters["fast_us"] = 1e6 * fast_s / n;
  state.counters["reference_us"] = 1e6 * reference_s / n;
  state.counters["speedup"] = reference_s / fast_s;
}

constexpr std::int64_t kRows = 4 * 128;

void BM_RmsNorm(benchmark::State& state, bool backward) {
  const std::int64_t dim = state.range(0);
  tensor::Context ctx({g_threads});
  const auto x = random_vector(static_cast<std::size_t>(kRows * dim), 1), w = random_vector(static_cast<std::size_t>(dim), 2);
  const auto dy = random_vector(x.size(), 3);
  std::vector<float> out(x.size()), rstd(kRows), dx(x.size()), dw(static_cast<std::size_t>(dim));
  tensor::rmsnorm_forward(ctx, out.data(), rstd.data(), x.data(), w.data(), kRows, dim, 1e-5f);
  if (backward) {
    side_by_side(
        state,
        [&] { tensor::rmsnorm_backward(ctx, dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), kRows, dim); },
        [&] {
          tensor::reference::rmsnorm_backward(ctx, dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(),
                                              kRows, dim);
        });
  } else {
    side_by_side(
        state, [&] { tensor::rmsnorm_forward(ctx, out.data(), rstd.data(), x.data(), w.data(), kRows, dim, 1e-5f); },
        [&] { tensor::reference::rmsnorm_forward(ctx, out.data(), rstd.data(), x.data(), w.data(), kRows, dim, 1e-5f); });
  }
}

int parse_threads(int& argc, char** argv) {
  int threads = 2, out = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0) threads = std::stoi(argv[i] + 10);
    else argv[out++] = argv[i];
  }
  argc = out;
  return threads;
}

}  // namespace

int main(int argc, char** argv) {
  g_threads = parse_threads(argc, argv);
  std::printf("threads: %d\nload average at start: %s\n", g_threads, ntp::bench::load_average().c_str());
  benchmark::Initialize(&argc, argv);
  // d_model of llama-small and llama-1b.
  benchmark::RegisterBenchmark("rmsnorm_forward/n512", BM_RmsNorm, false)->Arg(256)->Arg(2048)->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("rmsnorm_backward/n512", BM_RmsNorm, true)->Arg(256)->Arg(2048)->Unit(benchmark::kMicrosecond);
  benchmark::RunSpecifiedBenchmarks();
  std::printf("load average at end: %s\n", ntp::bench::load_average().c_str());
  benchmark::Shutdown();
  return 0;
}
