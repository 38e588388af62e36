// How long in-job recovery takes, from the outside: `ntp train` of dp 2 x tp 4
// on the `small` preset with elastic.recover, one worker SIGKILLed — or
// SIGSTOPped — by pid in the middle of training, several repetitions each.
// Per phase, from summary.json's `recoveries` (detection_s, agreement_s,
// transfer_s, redo_s, recovery_s), and measured by this program's clock:
// signal -> the first survivor's failure_detected, signal -> the last
// step_resumed, and signal -> the redone step done (+ redo_s). Printed as
// median / min / max beside the targets:
//
//   SIGKILL: training resumed within 1 s, plus one step
//   SIGSTOP: within deadline.heartbeat_s + 1 s, plus one step
//
// summary.json's detection_s starts at the launcher's record of the failure
// (the reaped death, or the fence of a stopped worker), so for SIGSTOP it
// leaves out the heartbeat wait: the signal -> rows are the user's view.
//
//   build/bench/train/recovery_bench [--reps N] [--steps N] [--rank R] [--keep] [--set KEY=VALUE]...
// --set: a configuration key over the bench's (e.g. elastic.settle_s=0.5 to
// compare a fixed settle wait with the derived one).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_files.h"


namespace {

namespace fs = std::filesystem;

constexpr double kHeartbeatS = 1.5;
const std::vector<std::string> kSets = {
    "parallel.dp=2",         "parallel.tp=4",          "model.preset=small",     "model.seq_len=32",
    "train.global_batch=8",  "train.micro_batch=4",    "run.trace_steps=0",      "elastic.recover=true",
    "deadline.collective_s=10", "deadline.rendezvous_s=30",
    "deadline.heartbeat_s=1.5"};

using ntp::testing::read_jsonl_lines;

// --set KEY=VALUE given on the command line, after the bench's own.
std::vector<std::string> extra_sets;

std::vector<std::string> command(const fs::path& dir, int steps) {
  std::vector<std::string> args = {"timeout", "-s", "KILL", "300", NTP_BINARY, "train", "--run-dir", dir.string()};
  for (const std::string& s : kSets) {
    args.push_back("--set");
    args.push_back(s);
  }
  args.push_back("--set");
  args.push_back("train.steps=" + std::to_string(steps));
  for (const std::string& s : extra_sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  return args;
}

std::string words(const std::vector<std::string>& args) {
  std::string text;
  for (const std::string& a : args) text += (text.empty() ? "" : " ") + a;
  return text;
}

struct Sample {
  std::map<std::string, double> phases;  // name -> seconds
  double step_s = 0;                     // median step time of the run
};

// One run: `signal` to `rank` once metrics.jsonl has `rows` rows, half a step
// later (so that it lands inside a step). Throws if the run did not recover.
Sample run_once(const fs::path& dir, int steps, int rank, int signal, std::size_t rows) {
  fs::remove_all(dir);
  const fs::path out = dir.string() + ".out";
  const std::vector<std::string> args = command(dir, steps);
  const ntp::testing::SignalledRun run = ntp::testing::signal_mid_run(args, dir, out, rank, signal, rows);
  const double sent_at = run.sent_at;
  if (run.code != 0 || sent_at == 0) {
    throw std::runtime_error("ntp train exit " + std::to_string(run.code) + (sent_at == 0 ? " before the signal" : "") +
                             "; see " + out.string());
  }
  std::ifstream summary_in(dir / "summary.json");
  const nlohmann::json summary = nlohmann::json::parse(summary_in);
  if (summary["recoveries"].size() != 1) {
    throw std::runtime_error(std::to_string(summary["recoveries"].size()) + " recoveries; see " + dir.string());
  }
  const nlohmann::json& r = summary["recoveries"][0];
  Sample s;
  for (const char* key : {"detection_s", "agreement_s", "transfer_s", "redo_s", "recovery_s"}) {
    s.phases[key] = r[key].get<double>();
  }
  double detected = 0;
  double resumed = 0;
  for (const nlohmann::json& e : read_jsonl_lines(dir / "events.jsonl")) {
    const std::string name = e.value("event", "");
    const double t = e.value("time", 0.0);
    if (name == "failure_detected" && t >= sent_at && detected == 0) detected = t;
    if (name == "step_resumed" && t >= sent_at) resumed = std::max(resumed, t);
  }
  s.phases["signal->detected"] = detected - sent_at;
  s.phases["signal->resumed"] = resumed - sent_at;
  s.phases["signal->redo done"] = resumed - sent_at + s.phases["redo_s"];
  std::vector<double> times;
  const std::int64_t redone = r["step"].get<std::int64_t>();
  for (const nlohmann::json& m : read_jsonl_lines(dir / "metrics.jsonl")) {
    if (m["step"] != 0 && m["step"] != redone) times.push_back(m["step_time_s"].get<double>());
  }
  std::sort(times.begin(), times.end());
  s.step_s = times.empty() ? 0 : times[times.size() / 2];
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void print_case(const std::string& name, const std::vector<Sample>& samples, double target_s) {
  const std::vector<std::string> order = {"detection_s",      "agreement_s",      "transfer_s",
                                          "redo_s",           "recovery_s",       "signal->detected",
                                          "signal->resumed",  "signal->redo done"};
  std::vector<double> steps;
  for (const Sample& s : samples) steps.push_back(s.step_s);
  const double step = median(steps);
  std::printf("\n%s: %zu runs, median step %.3f s\n", name.c_str(), samples.size(), step);
  std::printf("  %-18s %9s %9s %9s\n", "phase (s)", "median", "min", "max");
  for (const std::string& key : order) {
    std::vector<double> v;
    for (const Sample& s : samples) v.push_back(s.phases.at(key));
    std::printf("  %-18s %9.3f %9.3f %9.3f\n", key.c_str(), median(v), *std::min_element(v.begin(), v.end()),
                *std::max_element(v.begin(), v.end()));
  }
  std::vector<double> done;
  for (const Sample& s : samples) done.push_back(s.phases.at("signal->redo done"));
  const double target = target_s + step;
  std::printf("  target: signal->redo done < %.1f s + one step = %.3f s: median %.3f s, max %.3f s -> %s\n", target_s,
              target, median(done), *std::max_element(done.begin(), done.end()),
              *std::max_element(done.begin(), done.end()) < target ? "met" : "MISSED");
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  int steps = 30;
  int rank = 5;  // replica 1, slot 1: not the writer
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (a == "--steps" && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (a == "--rank" && i + 1 < argc) rank = std::atoi(argv[++i]);
    else if (a == "--keep") keep = true;
    else if (a == "--set" && i + 1 < argc) extra_sets.push_back(argv[++i]);
    else {
      std::fprintf(stderr, "usage: recovery_bench [--reps N] [--steps N] [--rank R] [--keep] [--set KEY=VALUE]...\n");
      return 2;
    }
  }
  const fs::path base = fs::temp_directory_path() / ("ntp_recovery_bench_" + std::to_string(::getpid()));
  fs::create_directories(base);
  std::printf("command: %s\n", words(command(base / "run", steps)).c_str());
  std::printf("signal to rank %d (pid from worker_started) half a step after metrics.jsonl has %d rows\n", rank,
              steps / 3);
  std::fflush(stdout);
  try {
    for (const auto& [name, signal, target] :
         {std::tuple{std::string("SIGKILL"), SIGKILL, 1.0}, std::tuple{std::string("SIGSTOP"), SIGSTOP, kHeartbeatS + 1.0}}) {
      std::vector<Sample> samples;
      for (int i = 0; i < reps; ++i) {
        const fs::path dir = base / (name + "-" + std::to_string(i));
        samples.push_back(run_once(dir, steps, rank, signal, static_cast<std::size_t>(steps / 3)));
        std::printf("%s run %d: signal->resumed %.3f s, recovery_s %.3f s, step %.3f s\n", name.c_str(), i,
                    samples.back().phases["signal->resumed"], samples.back().phases["recovery_s"],
                    samples.back().step_s);
        std::fflush(stdout);
        if (!keep) {
          fs::remove_all(dir);
          fs::remove(dir.string() + ".out");
        }
      }
      print_case(name, samples, target);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "recovery_bench: %s\n", e.what());
    return 1;
  }
  if (!keep) fs::remove_all(base);
  return 0;
}
