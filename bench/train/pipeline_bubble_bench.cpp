// The measured bubble of a 1F1B step run over point-to-point messages
// (run_stage), one thread rank per stage with its own Gloo group over
// loopback, each op a fixed sleep, beside the model: (pp - 1) / (m + pp - 1),
// simulate_pipeline on the nominal times, and simulate_pipeline on the times
// the run measured (each stage's mean op time, the mean hand-off).
//
//   build/bench/train/pipeline_bubble_bench [--forward-ms 20] [--backward-ms 40] [--reps 3]
//
// Prints one row per pp in {2, 4} x m in {4, 8, 16}: the median over reps.
// The ranks sleep nearly all the time, so on a host that other work keeps
// busy, `chrt -f 10 build/bench/...` keeps their wake-ups on time at almost
// no cost to the rest.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "tests/comm/thread_ranks.h"
#include "train/pipeline_executor.h"

namespace {

using ntp::train::OpSpan;
using ntp::train::PipelineOp;
using ntp::train::PipelineRun;
using ntp::train::PipelineSchedule;
using ntp::train::StageTimes;
using ntp::train::StageTiming;
using ntp::train::StageWork;
namespace testing = ntp::comm::testing;

struct Options {
  double forward_ms = 20, backward_ms = 40;
  int reps = 3;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument("missing value after " + arg);
    const char* value = argv[++i];
    if (arg == "--forward-ms") o.forward_ms = std::atof(value);
    else if (arg == "--backward-ms") o.backward_ms = std::atof(value);
    else if (arg == "--reps") o.reps = std::max(1, std::atoi(value));
    else throw std::invalid_argument("unknown option " + arg);
  }
  return o;
}

StageWork sleeping_work(const Options& o) {
  const auto forward = std::chrono::duration<double, std::milli>(o.forward_ms);
  const auto backward = std::chrono::duration<double, std::milli>(o.backward_ms);
  return {[=](int, std::span<const float>, std::span<float>) { std::this_thread::sleep_for(forward); },
          [=](int, std::span<const float>, std::span<float>) { std::this_thread::sleep_for(backward); }, 1024,
          1024};
}

// One step on pp thread ranks; their clocks start together after a barrier.
PipelineRun measure(const PipelineSchedule& schedule, const Options& o) {
  const int pp = schedule.pp();
  testing::TempStoreDir dir;
  auto store = ntp::comm::open_store(dir.spec());
  std::vector<StageTiming> timings(static_cast<std::size_t>(pp));
  testing::rethrow_first(testing::run_threads(pp, [&](int stage) {
    auto group = ntp::comm::create_group(store, testing::group_options(pp, stage, "pp"));
    group->barrier();
    timings[static_cast<std::size_t>(stage)] =
        ntp::train::run_stage(schedule, stage, ntp::train::StageLinks::paired(group.get(), stage > 0 ? stage - 1 : -1, stage < pp - 1 ? stage + 1 : -1),
                              sleeping_work(o), 0);
  }));
  return ntp::train::measured_run(schedule, timings);
}

// The times the run had: each stage's mean forward and backward, and the
// mean gap from an op's finish to the start of the neighbour's op that
// waited for its message.
StageTimes measured_times(const PipelineRun& run, const PipelineSchedule& schedule) {
  const int pp = schedule.pp();
  StageTimes times{std::vector<double>(static_cast<std::size_t>(pp)), std::vector<double>(static_cast<std::size_t>(pp)), 0};
  std::map<std::tuple<int, int, int>, OpSpan> span_of;  // (stage, kind, micro-batch)
  for (int s = 0; s < pp; ++s) {
    const auto& ops = schedule.stages[static_cast<std::size_t>(s)];
    for (std::size_t k = 0; k < ops.size(); ++k) {
      const OpSpan span = run.spans[static_cast<std::size_t>(s)][k];
      span_of[{s, static_cast<int>(ops[k].kind), ops[k].microbatch}] = span;
      auto& mean = ops[k].kind == PipelineOp::Kind::kForward ? times.forward : times.backward;
      mean[static_cast<std::size_t>(s)] += (span.finish - span.start) / schedule.microbatches;
    }
  }
  std::vector<double> gaps;
  for (int s = 0; s < pp; ++s) {
    const auto& ops = schedule.stages[static_cast<std::size_t>(s)];
    for (std::size_t k = 1; k < ops.size(); ++k) {
      const int from = ops[k].kind == PipelineOp::Kind::kForward ? s - 1 : s + 1;
      if (from < 0 || from >= pp) continue;
      const OpSpan sent = span_of[{from, static_cast<int>(ops[k].kind), ops[k].microbatch}];
      if (run.spans[static_cast<std::size_t>(s)][k - 1].finish < sent.finish)
        gaps.push_back(run.spans[static_cast<std::size_t>(s)][k].start - sent.finish);
    }
  }
  if (!gaps.empty()) times.p2p = std::max(0.0, std::accumulate(gaps.begin(), gaps.end(), 0.0) / gaps.size());
  return times;
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    std::printf("1F1B over loopback Gloo, thread ranks, forward %.0f ms, backward %.0f ms, median of %d\n\n",
                o.forward_ms, o.backward_ms, o.reps);
    std::printf("| pp | m | measured | formula | simulator | simulator, measured times | hand-off ms | measured / formula |\n");
    std::printf("|---|---|---|---|---|---|---|---|\n");
    for (const int pp : {2, 4})
      for (const int m : {4, 8, 16}) {
        const PipelineSchedule schedule = ntp::train::one_f_one_b(pp, m);
        std::vector<double> measured, simulated, handoff;
        for (int r = 0; r < o.reps; ++r) {
          const PipelineRun run = measure(schedule, o);
          const StageTimes times = measured_times(run, schedule);
          measured.push_back(run.bubble_fraction);
          simulated.push_back(ntp::train::simulate_pipeline(schedule, times).bubble_fraction);
          handoff.push_back(times.p2p * 1e3);
        }
        const std::vector<double> f(static_cast<std::size_t>(pp), o.forward_ms), b(static_cast<std::size_t>(pp), o.backward_ms);
        const double nominal = ntp::train::simulate_pipeline(schedule, {f, b, 0}).bubble_fraction;
        const double formula = static_cast<double>(pp - 1) / (m + pp - 1);
        const double bubble = median(measured);
        std::printf("| %d | %d | %.4f | %.4f | %.4f | %.4f | %.2f | %.3f |\n", pp, m, bubble, formula, nominal,
                    median(simulated), median(handoff), bubble / formula);
      }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipeline_bubble_bench: %s\n", e.what());
    return 1;
  }
}
