// Speed of the boost policy against the one std::pow it cannot avoid:
//   BM_StdPow           tdp * (n/k)^(1/alpha), the limit a degraded domain needs
//   BM_DomainSpeedup    power::domain_speedup (what the simulator calls per event)
//   BM_PlanBoost/R      power::plan_boost over R replicas (limits + shares)
// Each runs over the same k values (TP 32, k = 16..31). The "x_pow" counter is
// the time per domain divided by the time per std::pow measured in this same
// run (BM_StdPow runs first), so the ratio does not depend on the machine.
// Times are this thread's CPU time, so other processes on a shared machine
// do not enter the ratio.
#include <benchmark/benchmark.h>

#include <time.h>

#include <cmath>
#include <vector>

#include "power/boost_policy.h"

namespace {

using ntp::power::DevicePowerModel;

constexpr int kTp = 32;
const DevicePowerModel kModel{1000.0, 1.3, 0.65};
constexpr double kHeadroomW = 3200.0;  // the reference scenario's 10 % per domain

// Degraded degrees k = 16..31, cycled (all branches: need met, capped by budget, by device).
std::vector<int> degraded_ks() {
  std::vector<int> ks;
  for (int k = kTp / 2; k < kTp; ++k) ks.push_back(k);
  return ks;
}

double& pow_ns() {
  static double ns = 0.0;
  return ns;
}

double thread_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_nsec);
}

// Runs `body(i)` for i = 0, 1, ... and returns the CPU nanoseconds per call.
template <typename Body>
double time_per_call(benchmark::State& state, Body body) {
  std::size_t i = 0;
  const double start = thread_cpu_ns();
  for (auto _ : state) benchmark::DoNotOptimize(body(i++));
  return (thread_cpu_ns() - start) / static_cast<double>(state.iterations());
}

void report_ratio(benchmark::State& state, double ns_per_domain) {
  state.counters["ns_per_domain"] = ns_per_domain;
  if (pow_ns() > 0.0) state.counters["x_pow"] = ns_per_domain / pow_ns();
}

void BM_StdPow(benchmark::State& state) {
  const std::vector<int> ks = degraded_ks();
  double tdp = kModel.tdp_w;
  double inv_alpha = 1.0 / kModel.alpha;
  benchmark::DoNotOptimize(tdp);
  benchmark::DoNotOptimize(inv_alpha);
  pow_ns() = time_per_call(state, [&](std::size_t i) {
    const double need = static_cast<double>(kTp) / ks[i % ks.size()];
    return tdp * std::pow(need, inv_alpha);
  });
  state.counters["ns_per_domain"] = pow_ns();
}

void BM_DomainSpeedup(benchmark::State& state) {
  const std::vector<int> ks = degraded_ks();
  double headroom = kHeadroomW;
  benchmark::DoNotOptimize(headroom);
  report_ratio(state, time_per_call(state, [&](std::size_t i) {
                 return ntp::power::domain_speedup(kTp, ks[i % ks.size()], headroom, kModel);
               }));
}

void BM_PlanBoost(benchmark::State& state) {
  // R replicas, one in eight degraded (k = 16..31), the rest healthy.
  const auto replicas = static_cast<std::size_t>(state.range(0));
  const std::vector<int> ks = degraded_ks();
  std::vector<int> active(replicas, kTp);
  for (std::size_t r = 0; r < replicas; r += 8) active[r] = ks[(r / 8) % ks.size()];
  const long batch = 4 * static_cast<long>(replicas);
  const double ns = time_per_call(state, [&](std::size_t) {
    return ntp::power::plan_boost(kTp, active, kHeadroomW, batch, kModel).replicas.back().share;
  });
  report_ratio(state, ns / static_cast<double>(replicas));
}

}  // namespace

BENCHMARK(BM_StdPow);
BENCHMARK(BM_DomainSpeedup);
BENCHMARK(BM_PlanBoost)->Arg(8)->Arg(256)->Arg(4096);

BENCHMARK_MAIN();
