// A GPU slow rather than dead, side by side in one run: the same job
//   (a) healthy,
//   (b) rank 1 at SLOW=F from step 2 on, the layout left as it is,
//   (c) the same with elastic.relayout: the job finds rank 1 slow and gives
//       it a smaller shard in-job, then its larger one back once SLOW=1
//       (at two thirds of the steps) gives it its speed back.
// Each case runs the real `ntp train --verify`; the step time is the median
// of metrics.jsonl's step_time_s over the steps from 4 after the first
// relayout (or step 6) to the speed's return, the same steps in every case.
// The ideal for (c) is tp / (tp - 1 + 1/F) of (a) (tp 4, F 2: 1.143).
//
//   build/bench/train/slow_rank_bench [--dp 2] [--tp 4] [--steps 36] [--slow 2]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;

struct Options {
  int dp = 2;
  int tp = 4;
  int steps = 36;
  double slow = 2;
};

struct CaseResult {
  bool ok = false;
  std::vector<double> step_s;   // metrics.jsonl's step_time_s, by step
  int first_relayout_step = -1;  // the first step of the first relayout's epoch
  bool laid_out_back = false;    // a rank_speed_back event after the speed's return
  std::string verify;
};

std::vector<nlohmann::json> lines_of(const fs::path& file) {
  std::vector<nlohmann::json> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

CaseResult run_case(const Options& o, const std::string& name, const std::string& sets) {
  const fs::path dir = fs::temp_directory_path() / ("ntp_slow_rank_bench_" + name);
  fs::remove_all(dir);
  const std::string log = dir.string() + ".out";
  const std::string command =
      std::string(NTP_BINARY) + " train --run-dir " + dir.string() +
      " --set model.layers=4 --set model.d_model=256 --set model.heads=8 --set model.seq_len=128"
      " --set train.global_batch=16 --set train.micro_batch=16 --set run.trace_steps=0" +
      " --set parallel.dp=" + std::to_string(o.dp) + " --set parallel.tp=" + std::to_string(o.tp) +
      " --set train.steps=" + std::to_string(o.steps) + sets + " --verify > " + log + " 2>&1";
  CaseResult r;
  r.ok = std::system(command.c_str()) == 0;
  std::ifstream out(log);
  for (std::string line; std::getline(out, line);) {
    if (line.starts_with("verify:")) r.verify = line;
  }
  if (!r.ok) {
    std::fprintf(stderr, "case %s failed; see %s\n", name.c_str(), log.c_str());
    return r;
  }
  for (const nlohmann::json& m : lines_of(dir / "metrics.jsonl")) r.step_s.push_back(m["step_time_s"].get<double>());
  for (const nlohmann::json& e : lines_of(dir / "events.jsonl")) {
    if (e["event"] == "step_resumed" && r.first_relayout_step < 0) r.first_relayout_step = e["step"].get<int>();
    if (e["event"] == "rank_speed_back" && e["step"].get<int>() >= 2 * o.steps / 3) r.laid_out_back = true;
  }
  fs::remove_all(dir);
  fs::remove(log);
  return r;
}

double median_over(const std::vector<double>& v, int first, int last) {
  std::vector<double> w(v.begin() + first, v.begin() + last);
  std::sort(w.begin(), w.end());
  return w.empty() ? 0.0 : w[w.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--dp") o.dp = std::atoi(argv[i + 1]);
    else if (a == "--tp") o.tp = std::atoi(argv[i + 1]);
    else if (a == "--steps") o.steps = std::atoi(argv[i + 1]);
    else if (a == "--slow") o.slow = std::atof(argv[i + 1]);
  }
  const int back = 2 * o.steps / 3;
  char slow[160];
  std::snprintf(slow, sizeof slow, " --set 'test.failures=\"1@2:start:SLOW=%g; 1@%d:start:SLOW=1\"'", o.slow, back);
  const CaseResult a = run_case(o, "healthy", "");
  const CaseResult b = run_case(o, "slow", slow);
  const CaseResult c = run_case(o, "relayout",
                                std::string(slow) + " --set elastic.recover=true --set elastic.relayout=true"
                                                    " --set elastic.slow_steps=2");
  if (!a.ok || !b.ok || !c.ok) return 1;
  const int first = std::max(6, c.first_relayout_step + 4);
  if (first + 3 > back) {
    std::fprintf(stderr, "the relayout came at step %d: too late to measure before step %d (use more --steps)\n",
                 c.first_relayout_step, back);
    return 1;
  }
  const double ta = median_over(a.step_s, first, back);
  const double tb = median_over(b.step_s, first, back);
  const double tc = median_over(c.step_s, first, back);
  const double ideal = o.tp / (o.tp - 1 + 1 / o.slow);
  std::printf("dp %d x tp %d, rank 1 at SLOW=%g from step 2 to %d; median step time over steps %d-%d:\n", o.dp, o.tp,
              o.slow, back, first, back - 1);
  std::printf("  (a) healthy                 %.4f s\n", ta);
  std::printf("  (b) slow, no relayout       %.4f s  = %.3f x (a)\n", tb, tb / ta);
  std::printf("  (c) slow, relayout          %.4f s  = %.3f x (a); ideal %.3f; (c) / ideal %.3f\n", tc, tc / ta,
              ideal, tc / ta / ideal);
  std::printf("  first relayout: epoch starting at step %d; laid out back after the speed returned: %s\n",
              c.first_relayout_step, c.laid_out_back ? "yes" : "no");
  std::printf("  %s\n  %s\n  %s\n", a.verify.c_str(), b.verify.c_str(), c.verify.c_str());
  return 0;
}
