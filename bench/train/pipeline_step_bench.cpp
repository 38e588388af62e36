// A pipelined `ntp train` step against the pipeline simulator, per component.
// For each (pp, m) it trains the preset with one rank per stage (dp 1, tp 1),
// traces the steps after the first, and takes from the trace each stage's
// forward and backward op times and the pipeline's measured makespan (the
// first forward's start to the last backward's end, over every stage). The
// model is simulate_pipeline(one_f_one_b(pp, m)) on those op times (hand-off
// 0): its makespan and bubble. Printed per case: the step (metrics.jsonl), the
// measured and simulated makespan and their ratio, the bubble measured, by
// the simulator and by (pp - 1)/(m + pp - 1), the bottleneck stage's busy
// time, and the rest of the step (gradient sync tail, tied sum, commit,
// optimizer). Medians over the traced steps.
//
//   pipeline_step_bench [--family gpt2] [--preset small] [--pp 1,2] [--m 2,4,8] [--batch 2] [--seq 64]
//                       [--steps 4] [--layers 0 (the preset's)]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/support/bench_args.h"
#include "run_files.h"
#include "train/pipeline_schedule.h"

namespace {

namespace fs = std::filesystem;
using ntp::bench::flag;

std::vector<int> ints(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoi(item));
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One traced step of one stage (rank = stage at dp 1, tp 1), seconds.
struct StageStep {
  std::vector<double> forward, backward;
  double first_start = 1e300, last_end = 0;
};

struct Case {
  double step_s = 0, makespan_s = 0, model_makespan_s = 0, bubble = 0, model_bubble = 0, formula = 0;
  double bottleneck_busy_s = 0, rest_s = 0;
};

Case measure(const fs::path& dir, std::vector<std::string> sets, int pp, int m, int steps) {
  fs::remove_all(dir);
  sets.insert(sets.end(), {"parallel.pp=" + std::to_string(pp), "parallel.microbatches=" + std::to_string(m),
                           "train.steps=" + std::to_string(steps), "run.trace_steps=" + std::to_string(steps - 1)});
  std::vector<std::string> args = {NTP_BINARY, "train", "--run-dir", dir.string()};
  for (const std::string& set : sets) args.insert(args.end(), {"--set", set});
  const fs::path out = dir.string() + ".out";
  const pid_t child = ntp::testing::spawn_logged(args, out);
  int status = 0;
  ::waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::ifstream log(out);
    throw std::runtime_error("ntp train failed:\n" + std::string(std::istreambuf_iterator<char>(log), {}));
  }
  std::ifstream trace_file(dir / "trace.json");
  const nlohmann::json trace = nlohmann::json::parse(trace_file);
  std::map<std::int64_t, std::vector<StageStep>> traced;  // step -> per stage
  for (const nlohmann::json& e : trace["traceEvents"]) {
    if (e.value("ph", "") != "X" || !e.contains("args") || !e["args"].contains("step")) continue;
    const std::string name = e["name"];
    if (name != "forward" && name != "backward") continue;
    std::vector<StageStep>& stages = traced[e["args"]["step"].get<std::int64_t>()];
    stages.resize(static_cast<std::size_t>(pp));
    StageStep& s = stages.at(e["pid"].get<std::size_t>());
    const double start = e["ts"].get<double>() * 1e-6, dur = e["dur"].get<double>() * 1e-6;
    (name == "forward" ? s.forward : s.backward).push_back(dur);
    s.first_start = std::min(s.first_start, start);
    s.last_end = std::max(s.last_end, start + dur);
  }
  std::map<std::int64_t, double> step_time;
  for (const nlohmann::json& row : ntp::testing::read_jsonl_lines(dir / "metrics.jsonl")) {
    step_time[row["step"].get<std::int64_t>()] = row["step_time_s"].get<double>();
  }
  std::vector<double> step, makespan, model, bubble, model_bubble, busy, rest;
  const ntp::train::PipelineSchedule schedule = ntp::train::one_f_one_b(pp, m);
  for (const auto& [s, stages] : traced) {
    ntp::train::StageTimes times;
    double first = 1e300, last = 0, most = 0;
    // Stage 0 runs the first forward and the last backward: its window is
    // the pipeline's makespan, on one process's clock (a trace's times are
    // not comparable across processes).
    first = stages.front().first_start;
    last = stages.front().last_end;
    for (const StageStep& st : stages) {
      times.forward.push_back(median(st.forward));
      times.backward.push_back(median(st.backward));
      double sum = 0;
      for (double d : st.forward) sum += d;
      for (double d : st.backward) sum += d;
      most = std::max(most, sum);
    }
    const ntp::train::PipelineRun run = ntp::train::simulate_pipeline(schedule, times);
    step.push_back(step_time.at(s));
    makespan.push_back(last - first);
    model.push_back(run.makespan);
    bubble.push_back((last - first - most) / (last - first));
    model_bubble.push_back(run.bubble_fraction);
    busy.push_back(most);
    rest.push_back(step_time.at(s) - (last - first));
  }
  Case c;
  c.step_s = median(step);
  c.makespan_s = median(makespan);
  c.model_makespan_s = median(model);
  c.bubble = median(bubble);
  c.model_bubble = median(model_bubble);
  c.formula = static_cast<double>(pp - 1) / static_cast<double>(m + pp - 1);
  c.bottleneck_busy_s = median(busy);
  c.rest_s = median(rest);
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string preset = flag(argc, argv, "preset", "small");
  const std::vector<int> pps = ints(flag(argc, argv, "pp", "1,2"));
  const std::vector<int> ms = ints(flag(argc, argv, "m", "2,4,8"));
  const std::string batch = flag(argc, argv, "batch", "2");
  const int steps = std::stoi(flag(argc, argv, "steps", "4"));
  const std::string layers = flag(argc, argv, "layers", "0");
  const fs::path dir = fs::temp_directory_path() / ("ntp_pipeline_step_bench_" + std::to_string(::getpid()));
  std::printf("preset %s, dp 1 x tp 1, micro-batch %s x T %s, %d steps (%d traced); medians over the traced steps\n",
              preset.c_str(), batch.c_str(), flag(argc, argv, "seq", "64").c_str(), steps, steps - 1);
  std::printf("%3s %3s %8s %10s %10s %7s %9s %9s %8s %10s %7s\n", "pp", "m", "step s", "makespan", "simulated",
              "ratio", "bubble", "simulated", "formula", "busiest s", "rest s");
  for (int pp : pps) {
    for (int m : ms) {
      std::vector<std::string> sets = {"model.family=" + flag(argc, argv, "family", "gpt2"), "model.preset=" + preset, "model.seq_len=" + flag(argc, argv, "seq", "64"),
                                       "train.micro_batch=" + batch,
                                       "train.global_batch=" + std::to_string(m * std::stoi(batch))};
      if (layers != "0") sets.push_back("model.layers=" + layers);
      const Case c = measure(dir, sets, pp, m, steps);
      std::printf("%3d %3d %8.3f %10.3f %10.3f %7.3f %9.4f %9.4f %8.4f %10.3f %7.3f\n", pp, m, c.step_s, c.makespan_s,
                  c.model_makespan_s, c.makespan_s / c.model_makespan_s, c.bubble, c.model_bubble, c.formula,
                  c.bottleneck_busy_s, c.rest_s);
      std::fflush(stdout);
    }
  }
  fs::remove_all(dir);
  fs::remove(dir.string() + ".out");
  return 0;
}
