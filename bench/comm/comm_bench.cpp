// Side-by-side ratios for choices the comm layer makes:
//  - call checks (a descriptor all-gather before each collective) on vs off,
//  - a gradient bucket all-reduced after compute vs overlapped with it
//    (run_async), which is what the trainer does during backward.
// Ranks are threads of this process on loopback TCP; run with
//   build/bench/comm/comm_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <thread>
#include <vector>

#include <unistd.h>

#include "comm/group.h"

namespace {

using namespace ntp::comm;

constexpr int kRanks = 2;

// Runs `step` on every rank the same number of times: rank 0 inside the
// benchmark loop, the others on threads.
void run_ranks(benchmark::State& state, bool check_inputs, const std::function<void(Group&)>& step) {
  static int run = 0;
  const auto dir = std::filesystem::temp_directory_path() /
                   ("ntp-comm-bench-" + std::to_string(::getpid()) + "-" + std::to_string(run++));
  auto store = open_store("file:" + dir.string());
  auto options = [&](int rank) {
    GroupOptions o;
    o.ranks = {0, 1};
    o.global_rank = rank;
    o.name = "bench";
    o.check_inputs = check_inputs;
    return o;
  };
  const auto iterations = state.max_iterations;
  std::vector<std::thread> peers;
  for (int r = 1; r < kRanks; ++r) {
    peers.emplace_back([&, r] {
      auto g = create_group(store, options(r));
      for (benchmark::IterationCount i = 0; i < iterations; ++i) step(*g);
    });
  }
  {
    auto g = create_group(store, options(0));
    for (auto _ : state) step(*g);
  }
  for (auto& t : peers) t.join();
  std::filesystem::remove_all(dir);
}

void BM_AllReduce(benchmark::State& state) {
  const bool checks = state.range(0) != 0;
  const auto bytes = static_cast<std::size_t>(state.range(1));
  run_ranks(state, checks, [bytes](Group& g) {
    thread_local std::vector<float> data;
    data.assign(bytes / sizeof(float), 1.0f);
    g.all_reduce(data.data(), data.size());
  });
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}
BENCHMARK(BM_AllReduce)
    ->ArgNames({"checks", "bytes"})
    ->Args({0, 1024})->Args({1, 1024})
    ->Args({0, 1 << 20})->Args({1, 1 << 20})
    ->Iterations(100)->UseRealTime()->Unit(benchmark::kMicrosecond);

// A stand-in for the backward compute of one layer: ~1 ms of arithmetic.
void compute(std::vector<float>& scratch) {
  for (int pass = 0; pass < 40; ++pass)
    for (auto& x : scratch) x = x * 0.999f + 0.001f;
  benchmark::DoNotOptimize(scratch.data());
}

void BM_BucketAfterCompute(benchmark::State& state) {
  run_ranks(state, true, [](Group& g) {
    thread_local std::vector<float> bucket(1 << 18), scratch(1 << 14);
    compute(scratch);
    g.all_reduce(bucket.data(), bucket.size());
  });
}
BENCHMARK(BM_BucketAfterCompute)->Iterations(30)->UseRealTime()->Unit(benchmark::kMicrosecond);

void BM_BucketOverlappingCompute(benchmark::State& state) {
  run_ranks(state, true, [](Group& g) {
    thread_local std::vector<float> bucket(1 << 18), scratch(1 << 14);
    auto work = g.all_reduce_async(bucket.data(), bucket.size());
    compute(scratch);
    work->wait();
  });
}
BENCHMARK(BM_BucketOverlappingCompute)->Iterations(30)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
