// Planning cost at the scale of a large job: the vocabulary (U = 50,304
// units) of 512 replicas at TP 72 with 40 failed slots.
//
//   build-*/bench/layout/layout_bench
//
// PlanJob/healthy is the baseline; the other cases run side by side with it.
// The target for Failure40 (both layouts plus the transition) is well under
// 100 ms.
#include <benchmark/benchmark.h>

#include <random>

#include "layout/job_layout.h"
#include "layout/transition.h"

namespace ntp::layout {
namespace {

constexpr Unit kVocab = 50304;
constexpr int kTp = 72;
constexpr int kReplicas = 512;

JobConfig healthy() {
  return {.units = kVocab, .tp = kTp, .replicas = kReplicas};
}

// `count` failed slots on random replicas (seeded): a few replicas are hit
// more than once, so degraded replicas run at different k.
JobConfig with_failures(int count, std::uint64_t seed) {
  JobConfig config = healthy();
  std::mt19937_64 rng(seed);
  for (int placed = 0; placed < count;) {
    const int r = static_cast<int>(rng() % 48);  // clustered: repeats are likely
    const int slot = static_cast<int>(rng() % kTp);
    std::vector<int>& slots = config.failed[r * (kReplicas / 48)];
    if (std::find(slots.begin(), slots.end(), slot) != slots.end()) continue;
    slots.push_back(slot);
    ++placed;
  }
  return config;
}

void report(benchmark::State& state, const JobLayout& job, const TransitionPlan* plan) {
  state.counters["K"] = job.sync_degree;
  if (plan) {
    state.counters["moves"] = static_cast<double>(plan->moves.size());
    state.counters["cross_units"] = static_cast<double>(plan->cross_units);
  }
}

void PlanJob_healthy(benchmark::State& state) {
  const JobConfig config = healthy();
  for (auto _ : state) benchmark::DoNotOptimize(plan_job(config));
  report(state, plan_job(config), nullptr);
}

void PlanJob_failed40(benchmark::State& state) {
  const JobConfig config = with_failures(40, 1);
  for (auto _ : state) benchmark::DoNotOptimize(plan_job(config));
  report(state, plan_job(config), nullptr);
}

// Transition only, from the healthy layout to 40 failed slots (K drops, so
// every replica re-lays its units).
void Transition_healthy_to_failed40(benchmark::State& state) {
  const JobLayout from = plan_job(healthy()), to = plan_job(with_failures(40, 1));
  for (auto _ : state) benchmark::DoNotOptimize(plan_transition(from, to));
  const TransitionPlan plan = plan_transition(from, to);
  report(state, to, &plan);
}

// Everything a failure costs: both layouts and the transition between them.
void Failure40_end_to_end(benchmark::State& state) {
  const JobConfig before = healthy(), after = with_failures(40, 1);
  for (auto _ : state) {
    const JobLayout from = plan_job(before), to = plan_job(after);
    benchmark::DoNotOptimize(plan_transition(from, to));
  }
  const TransitionPlan plan = plan_transition(plan_job(before), plan_job(after));
  report(state, plan_job(after), &plan);
}

// One more failure on top of 39 (the common case in a long run).
void OneMoreFailure_39_to_40_end_to_end(benchmark::State& state) {
  JobConfig before = with_failures(40, 1);
  const JobConfig after = before;
  before.failed.begin()->second.pop_back();
  if (before.failed.begin()->second.empty()) before.failed.erase(before.failed.begin());
  for (auto _ : state) {
    const JobLayout from = plan_job(before), to = plan_job(after);
    benchmark::DoNotOptimize(plan_transition(from, to));
  }
  const TransitionPlan plan = plan_transition(plan_job(before), plan_job(after));
  report(state, plan_job(after), &plan);
}

BENCHMARK(PlanJob_healthy)->Unit(benchmark::kMillisecond);
BENCHMARK(PlanJob_failed40)->Unit(benchmark::kMillisecond);
BENCHMARK(Transition_healthy_to_failed40)->Unit(benchmark::kMillisecond);
BENCHMARK(Failure40_end_to_end)->Unit(benchmark::kMillisecond);
BENCHMARK(OneMoreFailure_39_to_40_end_to_end)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ntp::layout

BENCHMARK_MAIN();
