// Checkpoint costs, measured side by side in one run on this machine:
//
//   disk      sequential write with fsync (dd, 256 MiB) — the ceiling
//   save      MB/s of each checkpoint of `ntp train` (small preset, dp 2 x tp 4,
//             a checkpoint every 3 steps), from its checkpoint_saved events
//   stall     what a save costs the training loop: an update that waited for
//             the background host copy (checkpoint_copy_waited), a save that
//             waited for the previous one (wait_s), against the median step
//             time (target: < 5 %)
//   load      `ntp export` of the newest checkpoint (every byte read, checksums
//             compared; from the disk: a save drops its pages from the page cache)
//   restart   the same job with elastic.recover: one worker SIGKILLed (in-job
//             recovery: failure -> the redone step done) next to slot 0 of both
//             replicas SIGKILLed (in-job recovery impossible: failure -> the
//             first step after the restart from the checkpoint)
//
//   build/bench/train/checkpoint_bench [--keep]
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_files.h"

namespace {

namespace fs = std::filesystem;
using ntp::testing::events_named;
using ntp::testing::read_jsonl_lines;

const std::string kJob =
    " --set parallel.dp=2 --set parallel.tp=4 --set model.preset=small --set model.seq_len=32"
    " --set train.global_batch=8 --set train.micro_batch=4 --set run.trace_steps=0 --set train.steps=12"
    " --set train.checkpoint_every=3 --set elastic.recover=true --set elastic.settle_s=0.2"
    " --set deadline.collective_s=10 --set deadline.rendezvous_s=30 --set deadline.heartbeat_s=1.5";

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int shell(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

double median(std::vector<double> x) {
  if (x.empty()) return 0;
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}

// MB/s of a 256 MiB sequential write with fsync, timed by this program.
double disk_mb_s(const fs::path& dir) {
  const double start = now_s();
  if (shell("dd if=/dev/zero of=" + (dir / "dd.bin").string() + " bs=4M count=64 conv=fsync status=none") != 0) {
    return 0;
  }
  const double seconds = now_s() - start;
  fs::remove(dir / "dd.bin");
  return 256.0 * 1048576 / 1e6 / seconds;
}

bool train(const fs::path& run, const std::string& extra) {
  const std::string cmd = "timeout -s KILL 600 " + std::string(NTP_BINARY) + " train --run-dir " + run.string() +
                          kJob + extra + " > " + run.string() + ".out 2>&1";
  const int code = shell(cmd);
  if (code != 0) std::fprintf(stderr, "checkpoint_bench: `%s` exited %d (see %s.out)\n", cmd.c_str(), code, run.c_str());
  return code == 0;
}

double first_time(const fs::path& run, const std::string& event) {
  const std::vector<nlohmann::json> e = events_named(run, event);
  return e.empty() ? 0 : e.front()["time"].get<double>();
}

}  // namespace

int main(int argc, char** argv) {
  const bool keep = argc > 1 && std::strcmp(argv[1], "--keep") == 0;
  const fs::path dir = fs::temp_directory_path() / ("ntp_checkpoint_bench_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::printf("checkpoint bench: ntp train%s\n\n", kJob.c_str());

  const double disk = disk_mb_s(dir);
  const fs::path plain = dir / "plain";
  if (!train(plain, "")) return 1;
  std::vector<double> save_mb_s, copies, steps;
  double bytes = 0;
  for (const nlohmann::json& e : events_named(plain, "checkpoint_saved")) {
    save_mb_s.push_back(e["mb_per_s"].get<double>());
    bytes = e["bytes"].get<double>();
  }
  std::vector<double> waits;
  for (const nlohmann::json& e : events_named(plain, "checkpoint_part_written")) {
    copies.push_back(e["copy_s"].get<double>());
    waits.push_back(e["wait_s"].get<double>());
  }
  // The stall: a save waiting for the previous one, and an update waiting for the copy.
  std::vector<double> blocked;
  for (const nlohmann::json& e : events_named(plain, "checkpoint_copy_waited")) blocked.push_back(e["seconds"].get<double>());
  for (const nlohmann::json& m : read_jsonl_lines(plain / "metrics.jsonl")) steps.push_back(m["step_time_s"].get<double>());
  const double load_start = now_s();
  if (shell(std::string(NTP_BINARY) + " export " + plain.string() + " --llmc " + (dir / "export.bin").string() +
            " > /dev/null") != 0) {
    return 1;
  }
  const double load_mb_s = bytes / 1e6 / (now_s() - load_start);

  const fs::path in_job = dir / "in_job";
  const fs::path restart = dir / "restart";
  if (!train(in_job, " --set 'test.failures=\"2@6:start\"'")) return 1;
  if (!train(restart, " --set 'test.failures=\"0@6:start; 4@6:start\"'")) return 1;
  const nlohmann::json summary = nlohmann::json::parse(std::ifstream(in_job / "summary.json"));
  const nlohmann::json& r = summary["recoveries"].at(0);
  const double in_job_s = r["detection_s"].get<double>() + r["recovery_s"].get<double>() + r["redo_s"].get<double>();
  const double restart_s = first_time(restart, "fallback_step_done") - first_time(restart, "failure_injected");

  std::printf("%-10s %s\n", "disk", (std::to_string(disk) + " MB/s sequential write + fsync (dd, 256 MiB)").c_str());
  std::printf("%-10s %.1f MB/s median over %zu saves of %.1f MB (%.0f%% of the disk)\n", "save", median(save_mb_s),
              save_mb_s.size(), bytes / 1e6, 100 * median(save_mb_s) / disk);
  std::printf("%-10s %.1f MB/s (ntp export: every part read, checksums compared)\n", "load", load_mb_s);
  const auto worst = [](const std::vector<double>& x) { return x.empty() ? 0.0 : *std::max_element(x.begin(), x.end()); };
  std::printf("%-10s host copy (in the background, during the next step) median %.4f s, worst %.4f s; an update "
              "waited for it %zu times, worst %.4f s = %.2f%% of the median step %.3f s (target < 5%%); worst wait "
              "for the previous save %.4f s\n",
              "stall", median(copies), worst(copies), blocked.size(), worst(blocked),
              100 * std::max(worst(blocked), worst(waits)) / median(steps), median(steps), worst(waits));
  std::printf("%-10s in-job recovery %.3f s (detection %.3f + recovery %.3f + redo %.3f); restart from the "
              "checkpoint %.3f s: %.1fx\n",
              "restart", in_job_s, r["detection_s"].get<double>(), r["recovery_s"].get<double>(),
              r["redo_s"].get<double>(), restart_s, restart_s / in_job_s);
  if (!keep) fs::remove_all(dir);
  return 0;
}
