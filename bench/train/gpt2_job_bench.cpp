// GPT-2 124M through the real `ntp train`, B4 x T64, from an llm.c checkpoint
// (random init of the 124M shape, written by the bench): dp 1 x tp 1 with the
// host's threads, and dp 2 x tp 1 with one thread per rank. Per case it reports
// the start-up (launch to the last rank ready), the median step time, the
// exposed sync as a fraction of the step time (summary.json), the CPU time of
// the whole job (user + system, every process) per step, and the peak RSS of
// the largest process of the job. Start-up is given twice: launch to the last
// rank ready, and launch to the start of the first step (its metrics line's
// time less its step time); the first step itself is given too, as launch to
// its end: it is the step that first touches the gradients, the optimizer's
// moments and the activations, so what start-up no longer does shows there. dp 2 runs three times: the defaults (tied wte
// gradient synced in two parts, buckets pipelined), with the buckets' stages
// in series (sync.pipeline = false), and with wte synced whole after the
// embedding backward (sync.split_embedding = false). A nonuniform job, tp 2
// with replica 1 at tp 1 (so every bucket is resharded), runs pipelined and
// serial. Cases alternate, so repetitions see the same machine load; the load
// average is printed.
//
//   gpt2_job_bench [--reps N] [--steps N] [--checkpoint PATH (written when missing)] [--ntp PATH] [--against PATH]
//                  [--only TEXT] [--set KEY=VALUE ...] [--idle SECONDS]
// (--only: the cases whose name contains TEXT, e.g. "dp2" or "tp2+tp1"; --against: a
// second `ntp`, e.g. an older build, run right after each case with the same
// keys, so that both see the same load, and each figure's ratio printed; --set:
// a further key for this binary's runs only, e.g. --set model.huge_pages=false
// against the same binary; --idle: sleep this long before every run, so that
// each starts on an idle host: on a virtual machine whose host takes back
// freed guest memory, that is the cold start, docs/model.md).
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/support/host_load.h"
#include "model/config.h"
#include "model/init.h"
#include "model/llmc_checkpoint.h"
#include "model/parameters.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;

struct Case {
  const char* name;
  std::vector<std::string> keys;
};

struct Result {
  double startup_s = 0, first_step_s = 0, first_step_end_s = 0, median_step_s = 0, exposed = 0, wait_max = 0, peak_rss_mib = 0, cpu_s = 0;
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Runs argv to completion; returns its exit status, the peak RSS (MiB) of it
// and the children it waited for, and their CPU time.
int run(const std::vector<std::string>& args, const fs::path& out, double& peak_rss_mib, double& cpu_s) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&files, 1, 2);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, argv[0], &files, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  if (spawned != 0) return -1;
  int status = 0;
  rusage usage{};
  wait4(pid, &status, 0, &usage);
  peak_rss_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB on Linux
  const auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  cpu_s = seconds(usage.ru_utime) + seconds(usage.ru_stime);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::vector<nlohmann::json> read_jsonl(const fs::path& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

Result run_case(const std::string& ntp, const Case& c, const std::vector<std::string>& extra,
                const std::string& checkpoint, int steps, const fs::path& dir) {
  fs::remove_all(dir);
  std::vector<std::string> args = {ntp, "train", "--run-dir", dir.string(),
                                   "--set", "model.init_from=" + checkpoint,
                                   "--set", "model.seq_len=64",
                                   "--set", "train.global_batch=4",
                                   "--set", "train.steps=" + std::to_string(steps),
                                   // The final checkpoint (1.5 GB) on a loaded disk must not time out
                                   // the barrier after it: the bench times steps, not the disk.
                                   "--set", "deadline.collective_s=300",
                                   "--set", "deadline.rendezvous_s=700"};
  for (const std::string& k : c.keys) args.insert(args.end(), {"--set", k});
  for (const std::string& k : extra) args.insert(args.end(), {"--set", k});
  Result r;
  const double start = now_s();
  const fs::path out = dir.string() + ".out";
  if (run(args, out, r.peak_rss_mib, r.cpu_s) != 0) {
    std::fprintf(stderr, "%s: ntp train failed; see %s\n", c.name, out.c_str());
    std::exit(1);
  }
  double ready = start;
  for (const nlohmann::json& e : read_jsonl(dir / "events.jsonl")) {
    const std::string name = e.value("event", "");
    if (name == "rank_ready" || name == "model_ready") ready = std::max(ready, e["time"].get<double>());
  }
  r.startup_s = ready - start;
  std::vector<double> steps_s;
  for (const nlohmann::json& m : read_jsonl(dir / "metrics.jsonl")) {
    if (steps_s.empty()) {
      r.first_step_end_s = m["time"].get<double>() - start;
      r.first_step_s = r.first_step_end_s - m["step_time_s"].get<double>();
    }
    steps_s.push_back(m["step_time_s"].get<double>());
  }
  if (steps_s.size() > 1) steps_s.erase(steps_s.begin());  // the first step touches every page
  std::sort(steps_s.begin(), steps_s.end());
  r.median_step_s = steps_s[steps_s.size() / 2];
  std::ifstream in(dir / "summary.json");
  const nlohmann::json summary = nlohmann::json::parse(in);
  r.exposed = summary["exposed_sync_fraction"].get<double>();
  r.wait_max = summary.value("sync_wait_max_fraction", 0.0);  // an older --against build has none
  fs::remove_all(dir);
  fs::remove(out);
  return r;
}

std::string flag(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i] == "--" + name) return argv[i + 1];
  return fallback;
}

using ntp::bench::load_average;

void print(const char* name, const std::string& binary, int rep, int steps, const Result& r) {
  std::printf("%-26s %-6s rep %d: start-up %.2f s (to the first step %.2f s, to its end %.2f s), median step %.3f s, exposed sync "
              "%.1f%% of the step (longest wait of any rank %.1f%%), job CPU %.1f s (%.2f CPU-s per step), peak RSS %.0f MiB\n",
              name, binary.c_str(), rep, r.startup_s, r.first_step_s, r.first_step_end_s, r.median_step_s, 100 * r.exposed, 100 * r.wait_max, r.cpu_s,
              r.cpu_s / steps, r.peak_rss_mib);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = std::stoi(flag(argc, argv, "reps", "2"));
  const int steps = std::stoi(flag(argc, argv, "steps", "4"));
  const std::string ntp = flag(argc, argv, "ntp", NTP_BINARY);
  const std::string only = flag(argc, argv, "only", "");
  const std::string against = flag(argc, argv, "against", "");
  const int idle_s = std::stoi(flag(argc, argv, "idle", "0"));
  std::vector<std::string> extra;  // --set KEY=VALUE, repeatable: this binary's runs only
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--set") extra.emplace_back(argv[i + 1]);
  const fs::path tmp = fs::temp_directory_path() / ("ntp_gpt2_job_bench_" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  // --checkpoint: this file, written first when it does not exist (and kept, for the next run).
  std::string checkpoint = flag(argc, argv, "checkpoint", (tmp / "gpt2_124M.bin").string());
  if (!fs::exists(checkpoint)) {
    const ntp::model::GptConfig config = ntp::model::preset("gpt2");
    const ntp::model::ParameterLayout full(config, ntp::model::Shard::full(config));
    std::vector<float> params(static_cast<std::size_t>(full.size()));
    ntp::model::init_parameters(full, params, 1);
    ntp::model::write_llmc_checkpoint(checkpoint, config, params);
  }
  const std::vector<Case> cases = {
      {"dp1 x tp1, 2 threads", {"model.threads=2", "train.micro_batch=4"}},
      {"dp2 x tp1, 1 thread/rank", {"parallel.dp=2", "model.threads=1", "train.micro_batch=2"}},
      {"dp2, serial buckets", {"parallel.dp=2", "model.threads=1", "train.micro_batch=2", "sync.pipeline=false"}},
      {"dp2, wte synced whole", {"parallel.dp=2", "model.threads=1", "train.micro_batch=2",
                                 "sync.split_embedding=false"}},
      {"tp2+tp1, pipelined", {"parallel.dp=2", "parallel.tp=2", "parallel.failed={1=[1]}", "model.threads=1",
                              "train.micro_batch=2"}},
      {"tp2+tp1, serial buckets", {"parallel.dp=2", "parallel.tp=2", "parallel.failed={1=[1]}",
                                   "model.threads=1", "train.micro_batch=2", "sync.pipeline=false"}}};
  std::printf("ntp: %s\n", ntp.c_str());
  if (!against.empty()) std::printf("against: %s (printed as \"other\")\n", against.c_str());
  for (const std::string& k : extra) std::printf("this binary also with --set %s\n", k.c_str());
  std::printf("checkpoint: %s\nload average at start: %s\n", checkpoint.c_str(), load_average().c_str());
  for (int rep = 0; rep < reps; ++rep) {
    for (const Case& c : cases) {
      if (std::string(c.name).find(only) == std::string::npos) continue;
      ::sleep(static_cast<unsigned>(idle_s));
      const Result r = run_case(ntp, c, extra, checkpoint, steps, tmp / "run");
      print(c.name, "this", rep, steps, r);
      if (against.empty()) continue;
      ::sleep(static_cast<unsigned>(idle_s));
      const Result o = run_case(against, c, {}, checkpoint, steps, tmp / "run");
      print(c.name, "other", rep, steps, o);
      std::printf("%-26s this / other: start-up %.2f, to the first step %.2f, to its end %.2f, median step %.2f, peak RSS %.2f\n",
                  c.name, r.startup_s / o.startup_s, r.first_step_s / o.first_step_s, r.first_step_end_s / o.first_step_end_s,
                  r.median_step_s / o.median_step_s, r.peak_rss_mib / o.peak_rss_mib);
    }
  }
  std::printf("load average at end: %s\n", load_average().c_str());
  fs::remove_all(tmp);
  return 0;
}
