// The cost of a degraded replica, measured side by side in one run:
//   (a) uniform dp 2 x tp 4
//   (b) replica 0 without slot 2 (tp 3), batch policy proportional
// Same model, data, steps and global batch. Each case runs the real
// `ntp train` (one process per slot) and reads its summary.json; CPU time is
// that of every process of the run (RUSAGE_CHILDREN around it).
//
//   build-x/bench/train/train_bench [--steps N]
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;

int g_steps = 10;
const char* kModel =
    " --set model.layers=2 --set model.d_model=128 --set model.heads=8 --set model.seq_len=64"
    " --set train.global_batch=16 --set train.micro_batch=16 --set run.trace_steps=3";

struct CaseResult {
  double wall_per_step_s = 0;
  double cpu_s_per_token = 0;
  double exposed_fraction = 0;
  double reshard_bytes = 0;
  double allreduce_bytes = 0;
};
std::map<std::string, CaseResult> g_results;

double children_cpu_s() {
  rusage usage{};
  getrusage(RUSAGE_CHILDREN, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

void run_case(benchmark::State& state, const std::string& name, const std::string& parallel) {
  for (auto _ : state) {
    const fs::path dir = fs::temp_directory_path() / ("ntp_train_bench_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    const std::string command = std::string(NTP_BINARY) + " train --run-dir " + dir.string() +
                                kModel + " --set train.steps=" + std::to_string(g_steps) + parallel +
                                " > " + (dir.string() + ".out") + " 2>&1";
    const double cpu0 = children_cpu_s();
    const auto t0 = std::chrono::steady_clock::now();
    const int status = std::system(command.c_str());
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu = children_cpu_s() - cpu0;
    if (status != 0) {
      state.SkipWithError(("ntp train failed; see " + dir.string() + ".out").c_str());
      return;
    }
    std::ifstream in(dir / "summary.json");
    const nlohmann::json s = nlohmann::json::parse(in);
    CaseResult r;
    r.wall_per_step_s = s["mean_step_time_s"].get<double>();
    r.cpu_s_per_token = cpu / s["tokens"].get<double>();
    r.exposed_fraction = s["exposed_sync_fraction"].get<double>();
    r.reshard_bytes = s["reshard_bytes_per_step"].get<double>();
    r.allreduce_bytes = s["allreduce_bytes_per_step"].get<double>();
    g_results[name] = r;
    state.SetIterationTime(wall);
    state.counters["s_per_step"] = r.wall_per_step_s;
    state.counters["cpu_us_per_token"] = 1e6 * r.cpu_s_per_token;
    state.counters["exposed_sync_pct"] = 100 * r.exposed_fraction;
    state.counters["reshard_KB_step"] = r.reshard_bytes / 1024;
    state.counters["allreduce_KB_step"] = r.allreduce_bytes / 1024;
    fs::remove_all(dir);
    fs::remove(dir.string() + ".out");
  }
}

void BM_UniformDp2Tp4(benchmark::State& state) {
  run_case(state, "a", " --set parallel.dp=2 --set parallel.tp=4");
}
void BM_Replica0Tp3Proportional(benchmark::State& state) {
  run_case(state, "b",
           " --set parallel.dp=2 --set parallel.tp=4 --set parallel.failed={0=[2]}"
           " --set parallel.batch_policy=proportional");
}
BENCHMARK(BM_UniformDp2Tp4)->Iterations(1)->UseManualTime()->Unit(benchmark::kSecond);
BENCHMARK(BM_Replica0Tp3Proportional)->Iterations(1)->UseManualTime()->Unit(benchmark::kSecond);

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--steps") g_steps = std::stoi(argv[i + 1]);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (g_results.count("a") == 0 || g_results.count("b") == 0) return 1;
  const CaseResult& a = g_results["a"];
  const CaseResult& b = g_results["b"];
  std::printf("\n(b) / (a), same run:\n");
  std::printf("  wall time per step        %.3f  (%.3f s vs %.3f s)\n", b.wall_per_step_s / a.wall_per_step_s,
              b.wall_per_step_s, a.wall_per_step_s);
  std::printf("  CPU-seconds per token     %.3f  (target <= 1.02)\n", b.cpu_s_per_token / a.cpu_s_per_token);
  std::printf("  exposed sync / step time  %.2f%% vs %.2f%% (target: (b) <= (a) + 1%%)\n",
              100 * b.exposed_fraction, 100 * a.exposed_fraction);
  std::printf("  (b) reshard bytes per step %.0f vs DP all-reduce bytes %.0f (%.2f%%)\n", b.reshard_bytes,
              b.allreduce_bytes, 100 * b.reshard_bytes / b.allreduce_bytes);
  return 0;
}
