// Speed of the simulator on the reference scenario (examples/sim/b200_32k.toml):
//   timeline: 15 days x 100 seeds x 5 policies          (target < 5 s on 2 cores)
//   timeline: ~100k GPUs x 365 days x 100 seeds          (target < 60 s)
//   snapshot: 20 failed fractions x 1,000 placements     (target < 5 s)
// Each runs with 1 and 2 threads side by side; the "speedup" counter of the
// 2-thread case is measured against the 1-thread case of the same run. Wall
// time and CPU time of the whole process are both reported: on a shared
// machine the CPU time is the figure to compare with the targets.
#include <benchmark/benchmark.h>

#include <chrono>
#include <map>
#include <string>

#include "sim/pricing.h"
#include "sim/scenario_toml.h"
#include "sim/snapshot.h"
#include "sim/timeline.h"

namespace {

using namespace ntp::sim;

Scenario reference(const std::map<std::string, std::string>& sets) {
  const std::string path = std::string(NTP_SOURCE_DIR) + "/examples/sim/b200_32k.toml";
  toml::table t = load_scenario_file(path);
  for (const auto& [k, v] : sets) set_override(t, k, v);
  return scenario_from_table(t, path);
}

std::map<std::string, double>& one_thread_seconds() {
  static std::map<std::string, double> seconds;
  return seconds;
}

template <typename Run>
void measure(benchmark::State& state, const std::string& name, Scenario s, Run run) {
  s.run.threads = static_cast<int>(state.range(0));
  const Pricing pricing(s);
  double seconds = 0.0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(run(s, pricing));
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  if (s.run.threads == 1) one_thread_seconds()[name] = seconds;
  const auto it = one_thread_seconds().find(name);
  if (s.run.threads > 1 && it != one_thread_seconds().end()) {
    state.counters["speedup"] = it->second / seconds;
  }
}

auto timeline = [](const Scenario& s, const Pricing& p) {
  return run_timeline(s, p, nullptr).policy[0].goodput_mean;
};
auto snapshot = [](const Scenario& s, const Pricing& p) {
  return run_snapshot(s, p).points.back().mean[0];
};

void BM_TimelineReference15Days100Seeds(benchmark::State& state) {
  measure(state, "ref", reference({{"run.mode", "timeline"}}), timeline);
}

void BM_Timeline100kGpus365Days100Seeds(benchmark::State& state) {
  // 100,096 GPUs: the smallest multiple of TP x PP = 128 at or above 100,000.
  measure(state, "100k",
          reference({{"cluster.gpus", "100096"}, {"run.duration_days", "365"},
                     {"run.bucket_hours", "24"}}),
          timeline);
}

void BM_SnapshotSweep20Fractions1000Placements(benchmark::State& state) {
  measure(state, "snap", reference({{"run.mode", "snapshot"}}), snapshot);
}

}  // namespace

BENCHMARK(BM_TimelineReference15Days100Seeds)->Arg(1)->Arg(2)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime()->MeasureProcessCPUTime();
BENCHMARK(BM_Timeline100kGpus365Days100Seeds)->Arg(1)->Arg(2)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime()->MeasureProcessCPUTime();
BENCHMARK(BM_SnapshotSweep20Fractions1000Placements)->Arg(1)->Arg(2)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime()->MeasureProcessCPUTime();

BENCHMARK_MAIN();
