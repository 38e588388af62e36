// How in-job recovery's cost grows with the job: `ntp train` of dp 2 x tp T
// (T = 4, 8, 16, 32, 72: N = 8 ... 144 ranks, one model with 72 heads so that
// every T divides it), one worker (replica 1, slot 1) SIGKILLed from outside
// mid-step. Per phase, from every rank's events:
//
//   agreement  drop groups -> membership published      (membership_agreed)
//   transfer   exchange group, state moved, adopted     (state_transferred)
//   connect    the new epoch's groups                   (step_resumed.connect_*)
//
// wall seconds (the slowest rank), CPU-seconds summed over ranks (the whole
// process: communication, pool and watch threads; and the recovering thread
// alone, the phase's own work), store operations and bytes per
// rank (the recovery's own calls; connect's group rendezvous is not counted),
// Gloo bytes received per receiving rank; and, over N, the growth exponent b
// of a least-squares fit y = a N^b. On one machine the ranks share its cores,
// so wall time says little at large N (every rank is oversubscribed); per-rank
// operations, bytes and CPU are what scale-out would see. A size whose
// ports do not fit net.ipv4.ip_local_port_range is skipped, naming the sysctl
// (the range is per network namespace: a namespace of its own can widen it).
//
//   build/bench/train/recovery_scale_bench [--tp 4,8,16,32,72] [--redis] [--keep]
// --redis: the job's store is a redis-server started here (else the file store).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/port_budget.h"
#include "tests/comm/redis_server.h"
#include "run_files.h"

namespace {

namespace fs = std::filesystem;

// Deadlines for N ranks sharing this host's cores: 144 processes on 2 cores
// took 7.5 and 10 minutes from start until the last was ready to connect, so the
// start-up rendezvous (and the run's time limit) grow with N.
int rendezvous_s(int ranks) { return std::max(300, 6 * ranks); }

std::vector<std::string> command(const fs::path& dir, int tp, const std::string& store) {
  const int ranks = 2 * tp;
  const std::string limit = std::to_string(900 + 2 * rendezvous_s(ranks));
  // At nice 10, so that the store (at the default priority) still gets the
  // CPU it needs: on a cluster it has a host of its own, but here N busy
  // workers share 2 cores with it, and at N = 144 a starved redis-server
  // let workers' connects time out (3 s) and the launcher lose the store (20 s).
  std::vector<std::string> args = {"timeout", "-s", "KILL", limit, "nice", "-n", "10",
                                   NTP_BINARY, "train", "--run-dir", dir.string()};
  if (!store.empty()) {
    args.push_back("--store");
    args.push_back(store);
  }
  const std::vector<std::string> sets = {
      "parallel.dp=2",          "parallel.tp=" + std::to_string(tp), "model.heads=72",
      "model.d_model=144",      "model.layers=1",                    "model.seq_len=16",
      "train.global_batch=16",  "train.steps=8",                     "run.trace_steps=0",
      "elastic.recover=true",   "deadline.collective_s=120",         "deadline.rendezvous_s=" + std::to_string(rendezvous_s(ranks)),
      "deadline.heartbeat_s=120", "deadline.straggler_s=60"};
  for (const std::string& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  return args;
}

// One phase's figures over the ranks of one run.
struct Phase {
  double wall_s = 0;         // the slowest rank
  double cpu_s = 0;          // summed over ranks: the whole process
  double thread_cpu_s = 0;   // summed over ranks: the recovering thread alone (the phase's own work)
  double drop_cpu_s = 0;     // of thread_cpu_s, closing the failed epoch's groups (agreement only)
  double plan_cpu_s = 0;     // of thread_cpu_s, planning the next epoch from the agreed membership (agreement only)
  double ops_per_rank = 0;   // mean
  double ops_max = 0;
  double bytes_per_rank = 0;
};

struct Row {
  int ranks = 0;
  std::map<std::string, Phase> phases;
  double gloo_bytes_per_receiver = 0;
  double recovery_s = 0;  // signal -> the last step_resumed
};

Phase phase_of(const std::vector<nlohmann::json>& events, const std::string& seconds, const std::string& cpu,
               bool counted) {
  Phase p;
  for (const nlohmann::json& e : events) {
    p.wall_s = std::max(p.wall_s, e.value(seconds, 0.0));
    p.cpu_s += e.value(cpu, 0.0);
    p.thread_cpu_s += e.value("thread_cpu_s", 0.0);
    p.drop_cpu_s += e.value("drop_thread_cpu_s", 0.0);
    p.plan_cpu_s += e.value("plan_thread_cpu_s", 0.0);
    if (!counted) continue;
    const double ops = e.value("store_ops", 0.0);
    p.ops_per_rank += ops / static_cast<double>(events.size());
    p.ops_max = std::max(p.ops_max, ops);
    p.bytes_per_rank += e.value("store_bytes", 0.0) / static_cast<double>(events.size());
  }
  return p;
}

Row run_once(const fs::path& dir, int tp, const std::string& store) {
  fs::remove_all(dir);
  const fs::path out = dir.string() + ".out";
  const ntp::testing::SignalledRun run = ntp::testing::signal_mid_run(command(dir, tp, store), dir, out, tp + 1, SIGKILL, 3);
  if (run.code != 0 || run.sent_at == 0) {
    throw std::runtime_error("tp " + std::to_string(tp) + ": ntp train exit " + std::to_string(run.code) + "; see " +
                             out.string());
  }
  Row row;
  row.ranks = 2 * tp;
  const auto agreed = ntp::testing::events_named(dir, "membership_agreed");
  const auto moved = ntp::testing::events_named(dir, "state_transferred");
  const auto resumed = ntp::testing::events_named(dir, "step_resumed");
  if (agreed.empty() || moved.empty() || resumed.empty()) throw std::runtime_error("no recovery events in " + dir.string());
  row.phases["agreement"] = phase_of(agreed, "seconds", "cpu_s", true);
  row.phases["transfer"] = phase_of(moved, "seconds", "cpu_s", true);
  row.phases["connect"] = phase_of(resumed, "connect_s", "connect_cpu_s", false);
  double received = 0;
  int receivers = 0;
  for (const nlohmann::json& e : moved) {
    if (e.value("bytes_in", 0.0) <= 0) continue;
    received += e.value("bytes_in", 0.0);
    ++receivers;
  }
  row.gloo_bytes_per_receiver = receivers > 0 ? received / receivers : 0;
  for (const nlohmann::json& e : resumed) row.recovery_s = std::max(row.recovery_s, e.value("time", 0.0) - run.sent_at);
  return row;
}

// b of y = a N^b, least squares in log-log; NaN when a value is not positive.
double exponent(const std::vector<Row>& rows, const std::function<double(const Row&)>& y) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const double n = static_cast<double>(rows.size());
  for (const Row& r : rows) {
    if (y(r) <= 0) return std::nan("");
    const double lx = std::log(static_cast<double>(r.ranks));
    const double ly = std::log(y(r));
    sx += lx;
    sy += ly;
    sxx += lx * lx;
    sxy += lx * ly;
  }
  return (n * sxy - sx * sy) / (n * sxx - sx * sx);
}

void print(const std::vector<Row>& rows) {
  std::printf("\n%-10s %6s %9s %9s %9s %9s %9s %10s %10s %12s\n", "phase", "N", "wall s", "CPU s", "thread s",
              "drop s", "plan s", "ops/rank", "ops max", "bytes/rank");
  for (const char* name : {"agreement", "transfer", "connect"}) {
    for (const Row& r : rows) {
      const Phase& p = r.phases.at(name);
      std::printf("%-10s %6d %9.3f %9.3f %9.3f %9.3f %9.3f %10.1f %10.0f %12.0f\n", name, r.ranks, p.wall_s,
                  p.cpu_s, p.thread_cpu_s, p.drop_cpu_s, p.plan_cpu_s, p.ops_per_rank, p.ops_max, p.bytes_per_rank);
    }
  }
  std::printf("\n%6s %14s %12s\n", "N", "Gloo B/recv", "signal->resumed s");
  for (const Row& r : rows) std::printf("%6d %14.0f %12.3f\n", r.ranks, r.gloo_bytes_per_receiver, r.recovery_s);
  if (rows.size() < 2) return;
  std::printf("\ngrowth exponent b (y = a N^b) over N = %d..%d:\n", rows.front().ranks, rows.back().ranks);
  for (const char* name : {"agreement", "transfer", "connect"}) {
    const auto of = [name](auto field) { return [name, field](const Row& r) { return field(r.phases.at(name)); }; };
    std::printf("  %-10s wall %6.2f  CPU/rank %6.2f  thread CPU/rank %6.2f  ops/rank %6.2f  bytes/rank %6.2f\n",
                name, exponent(rows, of([](const Phase& p) { return p.wall_s; })),
                exponent(rows, [name](const Row& r) { return r.phases.at(name).cpu_s / r.ranks; }),
                exponent(rows, [name](const Row& r) { return r.phases.at(name).thread_cpu_s / r.ranks; }),
                exponent(rows, of([](const Phase& p) { return p.ops_per_rank; })),
                exponent(rows, of([](const Phase& p) { return p.bytes_per_rank; })));
  }
  std::printf("  agreement without closing the old groups: thread CPU/rank %6.2f\n",
              exponent(rows, [](const Row& r) {
                const Phase& p = r.phases.at("agreement");
                return (p.thread_cpu_s - p.drop_cpu_s) / r.ranks;
              }));
  std::printf("  agreement's store protocol (without closing groups and planning): thread CPU/rank %6.2f\n",
              exponent(rows, [](const Row& r) {
                const Phase& p = r.phases.at("agreement");
                return (p.thread_cpu_s - p.drop_cpu_s - p.plan_cpu_s) / r.ranks;
              }));
  std::printf("  planning the next epoch: thread CPU/rank %6.2f\n", exponent(rows, [](const Row& r) {
                const Phase& p = r.phases.at("agreement");
                return p.plan_cpu_s / r.ranks;
              }));
  std::printf("  Gloo bytes per receiving rank %6.2f\n", exponent(rows, [](const Row& r) { return r.gloo_bytes_per_receiver; }));
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> tps = {4, 8, 16, 32, 72};
  bool keep = false;
  bool redis = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--tp" && i + 1 < argc) {
      tps.clear();
      std::stringstream list(argv[++i]);
      for (std::string t; std::getline(list, t, ',');) tps.push_back(std::stoi(t));
    } else if (a == "--keep") {
      keep = true;
    } else if (a == "--redis") {
      redis = true;
    } else {
      std::fprintf(stderr, "usage: recovery_scale_bench [--tp 4,8,16,32,72] [--redis] [--keep]\n");
      return 2;
    }
  }
  const fs::path base = fs::temp_directory_path() / ("ntp_recovery_scale_" + std::to_string(::getpid()));
  fs::create_directories(base);
  // The file store emulates Redis's blocking list reads by polling, so its
  // operation counts grow with the wait; Redis answers them in the server.
  std::unique_ptr<ntp::comm::testing::RedisServer> server;
  if (redis) server = std::make_unique<ntp::comm::testing::RedisServer>();
  std::vector<Row> rows;
  try {
    for (int tp : tps) {
      // One host holding every rank needs a port per peer of each group (docs/comm.md, "Ports").
      const auto range = ntp::comm::ephemeral_port_range();
      if (const auto shortfall = range ? ntp::comm::port_shortfall(2 * tp, {2 * tp, tp, 2}, *range) : std::nullopt) {
        std::printf("N = %d skipped: %s\n", 2 * tp, shortfall->c_str());
        continue;
      }
      const fs::path dir = base / ("tp" + std::to_string(tp));
      std::vector<std::string> args = command(dir, tp, server ? server->spec("tp" + std::to_string(tp)) : "");
      std::string words;
      for (const std::string& w : args) words += (words.empty() ? "" : " ") + w;
      std::printf("N = %d: %s; SIGKILL to rank %d after 3 steps\n", 2 * tp, words.c_str(), tp + 1);
      std::fflush(stdout);
      rows.push_back(run_once(dir, tp, server ? server->spec("tp" + std::to_string(tp)) : ""));
      std::printf("  signal->resumed %.2f s\n", rows.back().recovery_s);
      std::fflush(stdout);
      if (!keep) {
        fs::remove_all(dir);
        fs::remove(dir.string() + ".out");
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "recovery_scale_bench: %s\n", e.what());
    print(rows);
    return 1;
  }
  print(rows);
  if (!keep) fs::remove_all(base);
  return 0;
}
