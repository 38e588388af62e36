// `ntp launch` and `ntp train` as a user runs them: the real executable.
#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <fstream>
#include <thread>
#include <cstdio>
#include <filesystem>

#include "tests/comm/redis_server.h"
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "comm/job_store.h"
#include "power/boost_policy.h"

namespace {

namespace fs = std::filesystem;

struct CommandResult {
  int code = -1;
  std::string output;  // stdout and stderr
};

CommandResult ntp_with_env(const std::string& env, const std::string& args) {
  const std::string command = env + " " + std::string(NTP_BINARY) + " " + args + " 2>&1";
  CommandResult run;
  std::FILE* pipe = ::popen(command.c_str(), "r");
  std::array<char, 4096> buffer{};
  for (std::size_t n; (n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0;) {
    run.output.append(buffer.data(), n);
  }
  const int status = ::pclose(pipe);
  run.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

CommandResult ntp(const std::string& args) { return ntp_with_env("", args); }

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A parameterized test's name has a '/': one directory, not a parent
    // that TearDown would leave behind.
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ = fs::temp_directory_path() / ("ntp_cli_test_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

std::vector<nlohmann::json> read_lines(const fs::path& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

struct KilledRun {
  int code = -1;
  std::string output;
  double seconds = 0;
};

// Runs a long `ntp train` with `sets` and SIGKILLs worker `rank` once training
// is under way (metrics.jsonl exists); returns how `ntp train` ended.
KilledRun train_and_kill_rank(const fs::path& dir, const std::string& sets, int rank) {
  const fs::path out_file = dir.string() + ".out";
  const std::string command = std::string(NTP_BINARY) + " train --run-dir " + dir.string() +
                              " --set train.steps=100000 --set model.layers=1 " + sets + " > " +
                              out_file.string() + " 2>&1";
  std::thread killer([&] {
    for (int i = 0; i < 600; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (!fs::exists(dir / "metrics.jsonl")) continue;
      for (const nlohmann::json& e : read_lines(dir / "events.jsonl")) {
        if (e["event"] == "worker_started" && e["rank"] == rank) {
          ::kill(e["pid"].get<int>(), SIGKILL);
          return;
        }
      }
    }
  });
  const auto start = std::chrono::steady_clock::now();
  const int status = std::system(command.c_str());
  killer.join();
  KilledRun run;
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream out(out_file);
  run.output.assign(std::istreambuf_iterator<char>(out), std::istreambuf_iterator<char>());
  fs::remove(out_file);
  return run;
}

TEST_F(CliTest, LaunchReportsWhoDiedAndExitsNonZero) {
  const CommandResult run = ntp("launch --nproc 3 --straggler-timeout 0.2 --run-dir " + dir_.string() +
                      " -- sh -c 'if [ $RANK = 2 ]; then kill -SEGV $$; fi; sleep 20'");
  EXPECT_EQ(run.code, 1) << run.output;
  EXPECT_NE(run.output.find("rank 2 (pid"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("killed by signal 11"), std::string::npos) << run.output;
  EXPECT_TRUE(fs::exists(dir_ / "logs" / "rank-0.log"));
  EXPECT_TRUE(fs::exists(dir_ / "events.jsonl"));
}

TEST_F(CliTest, LaunchSucceedsWhenEveryWorkerDoes) {
  const CommandResult run = ntp("launch --nproc 2 --run-dir " + dir_.string() + " -- true");
  EXPECT_EQ(run.code, 0) << run.output;
}

// On Redis, node 0 claims a job and hands its id to the workers in
// NTP_STORE; another node that names no job, or a wrong one, is refused.
TEST_F(CliTest, LaunchOnRedisRunsUnderAJobIdThatEveryNodeMustName) {
  if (!ntp::comm::testing::RedisServer::available()) GTEST_SKIP() << "redis-server is not installed";
  ntp::comm::testing::RedisServer redis;
  const CommandResult first = ntp("launch --nproc 1 --run-dir " + dir_.string() + " --store " + redis.spec("cli") +
                                  " -- sh -c 'echo store=$NTP_STORE'");
  EXPECT_EQ(first.code, 0) << first.output;
  std::ifstream log(dir_ / "logs" / "rank-0.log");
  const std::string worker((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(worker.find("store=" + redis.spec("cli") + "?job="), std::string::npos) << worker;
  EXPECT_NE(first.output.find("start the other nodes with --store"), std::string::npos) << first.output;
  const CommandResult nameless = ntp("launch --nnodes 2 --node-rank 1 --nproc 1 --store " + redis.spec("cli") + " -- true");
  EXPECT_EQ(nameless.code, 2) << nameless.output;
  EXPECT_NE(nameless.output.find("must name the job node 0 printed"), std::string::npos) << nameless.output;
  const CommandResult wrong = ntp("launch --nnodes 2 --node-rank 1 --nproc 1 --store " + redis.spec("cli") +
                                  "?job=0123456789abcdef -- true");
  EXPECT_EQ(wrong.code, 2) << wrong.output;
  EXPECT_NE(wrong.output.find("no job '0123456789abcdef'"), std::string::npos) << wrong.output;
}

// Several hosts: flags that cannot make a job are refused before anything
// is created or contacted.
TEST_F(CliTest, TrainAcrossHostsRefusesInconsistentFlags) {
  const CommandResult no_store = ntp("train --nnodes 2 --run-dir " + dir_.string());
  EXPECT_EQ(no_store.code, 2) << no_store.output;
  EXPECT_NE(no_store.output.find("give --store redis://HOST:PORT"), std::string::npos) << no_store.output;
  const CommandResult uneven = ntp("train --nnodes 2 --store redis://127.0.0.1:1 --set parallel.dp=3 "
                                   "--set parallel.tp=2 --run-dir " + dir_.string());
  EXPECT_EQ(uneven.code, 2) << uneven.output;
  EXPECT_NE(uneven.output.find("parallel.dp = 3 replicas do not split evenly over 2 hosts"), std::string::npos)
      << uneven.output;
  const CommandResult nameless = ntp("train --nnodes 2 --node-rank 1 --store redis://127.0.0.1:1");
  EXPECT_EQ(nameless.code, 2) << nameless.output;
  EXPECT_NE(nameless.output.find("node 1 must name the job node 0 printed"), std::string::npos) << nameless.output;
  const CommandResult file_store = ntp("train --store file:/tmp --run-dir " + dir_.string());
  EXPECT_EQ(file_store.code, 2) << file_store.output;
  EXPECT_FALSE(fs::exists(dir_)) << "nothing may be created for rejected flags";
}

// A node other than 0 joins node 0's announcement: a different --nnodes, or a
// run directory it cannot see (no shared file system), is refused.
TEST_F(CliTest, TrainNodeRefusesAnotherNnodesAndAnInvisibleRunDirectory) {
  if (!ntp::comm::testing::RedisServer::available()) GTEST_SKIP() << "redis-server is not installed";
  ntp::comm::testing::RedisServer redis;
  const auto announce = [&](const fs::path& run_dir) {
    const std::string spec = ntp::comm::start_job(redis.spec("node"));
    const nlohmann::json run = {{"run_dir", run_dir.string()}, {"nnodes", 2}};
    ntp::comm::open_store(spec)->append("ntp/run", ntp::comm::to_bytes(run.dump()));
    return spec;
  };
  const std::string unseen = announce(dir_ / "not-here");
  const CommandResult invisible = ntp("train --nnodes 2 --node-rank 1 --store " + unseen);
  EXPECT_EQ(invisible.code, 2) << invisible.output;
  EXPECT_NE(invisible.output.find("is not visible on node 1"), std::string::npos) << invisible.output;
  const CommandResult three = ntp("train --nnodes 3 --node-rank 1 --store " + unseen);
  EXPECT_EQ(three.code, 2) << three.output;
  EXPECT_NE(three.output.find("node 0 started job"), std::string::npos) << three.output;
}

// One host on a Redis store: the job claims an id, prints the placement, and
// the workers rendezvous there.
TEST_F(CliTest, TrainOnRedisRunsUnderAJobAndPrintsThePlacement) {
  if (!ntp::comm::testing::RedisServer::available()) GTEST_SKIP() << "redis-server is not installed";
  ntp::comm::testing::RedisServer redis;
  const CommandResult run = ntp("train --store " + redis.spec("train") + " --run-dir " + dir_.string() +
                                " --set parallel.dp=2 --set parallel.tp=2 --set train.steps=3 --set train.global_batch=4");
  EXPECT_EQ(run.code, 0) << run.output;
  EXPECT_NE(run.output.find("on 1 host: node 0: replicas 0,1 (ranks 0-3)"), std::string::npos) << run.output;
  EXPECT_FALSE(fs::exists(dir_ / "store")) << "no file store beside Redis";
  bool placed = false;
  for (const nlohmann::json& e : read_lines(dir_ / "events.jsonl")) placed |= e.value("event", "") == "job_placed";
  EXPECT_TRUE(placed);
}

// Two hosts on one machine: each holds one rank, so with model.threads = 0
// each rank's pool takes every core of its host, not cores / world size.
TEST_F(CliTest, EachRankTakesTheCoresOfItsHostNotOfTheWholeJob) {
  if (!ntp::comm::testing::RedisServer::available()) GTEST_SKIP() << "redis-server is not installed";
  const unsigned cores = std::thread::hardware_concurrency();
  if (cores < 2) GTEST_SKIP() << "one core: cores / 1 and cores / 2 are the same pool";
  ntp::comm::testing::RedisServer redis;
  const fs::path node0_out = dir_.string() + ".node0";
  const std::string node0 = std::string(NTP_BINARY) + " train --nnodes 2 --node-rank 0 --store " +
                            redis.spec("threads") + " --run-dir " + dir_.string() +
                            " --set parallel.dp=2 --set parallel.tp=1 --set train.steps=2 --set train.global_batch=4 > " +
                            node0_out.string() + " 2>&1";
  int node0_status = -1;
  std::thread first([&] { node0_status = std::system(node0.c_str()); });
  std::string spec;  // node 0 prints the spec with its job id, which node 1 must name
  for (int i = 0; i < 600 && spec.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ifstream in(node0_out);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::size_t at = text.find("--store redis://");
    if (at != std::string::npos) spec = text.substr(at + 8, text.find_first_of(" \n", at + 8) - at - 8);
  }
  ASSERT_FALSE(spec.empty()) << "node 0 printed no job spec within 30 s";
  const CommandResult node1 = ntp("train --nnodes 2 --node-rank 1 --store " + spec);
  first.join();
  fs::remove(node0_out);
  ASSERT_EQ(node1.code, 0) << node1.output;
  ASSERT_TRUE(WIFEXITED(node0_status) && WEXITSTATUS(node0_status) == 0);
  const std::string pool = "pool " + std::to_string(cores) + " threads";
  int ready = 0;
  for (const nlohmann::json& e : read_lines(dir_ / "events.jsonl")) {
    if (e.value("event", "") != "rank_ready") continue;
    ++ready;
    EXPECT_NE(e.value("threads", "").find(pool), std::string::npos) << e.dump();
  }
  EXPECT_EQ(ready, 2);
}

TEST_F(CliTest, LaunchRejectsBadFlags) {
  EXPECT_EQ(ntp("launch --nproc 0 -- true").code, 2);
  EXPECT_EQ(ntp("launch --nproc 2 --store tcp://x -- true").code, 2);
  EXPECT_EQ(ntp("launch --nproc 2").code, 2);
}

}  // namespace

namespace {

// `ntp train --verify --json` on a small multi-process job; returns the verify
// object's line.
std::string train_and_verify(const fs::path& dir, const std::string& sets, int* code,
                             const std::string& env = "") {
  const CommandResult run = ntp_with_env(
      env, "train --run-dir " + dir.string() +
               " --set train.steps=3 --set model.layers=1 --set model.seq_len=32"
               " --set train.micro_batch=2 --set deadline.collective_s=20 " + sets + " --verify --json");
  *code = run.code;
  // The verify object is the last line that starts with '{' and has "verify".
  std::size_t at = std::string::npos;
  for (std::size_t start = 0; start < run.output.size();) {
    const std::size_t end = std::min(run.output.find('\n', start), run.output.size());
    if (run.output[start] == '{' && run.output.find("\"verify\":", start) < end) at = start;
    start = end + 1;
  }
  return at == std::string::npos ? run.output : run.output.substr(at);
}

struct VerifyCase {
  const char* name;
  std::string sets;
};

void PrintTo(const VerifyCase& c, std::ostream* os) { *os << c.name; }

class TrainVerifyTest : public CliTest, public ::testing::WithParamInterface<VerifyCase> {};

TEST_P(TrainVerifyTest, MatchesTheSingleProcessReplay) {
  int code = -1;
  const std::string line = train_and_verify(dir_, GetParam().sets, &code);
  EXPECT_EQ(code, 0) << line;
  EXPECT_NE(line.find("\"verify\":\"pass\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"steps\":3"), std::string::npos) << line;
}

INSTANTIATE_TEST_SUITE_P(
    Configurations, TrainVerifyTest,
    ::testing::Values(
        VerifyCase{"uniform_dp2_tp4", "--set parallel.dp=2 --set parallel.tp=4"},
        VerifyCase{"slot2_lost_fixed",
                   "--set parallel.dp=2 --set parallel.tp=4 --set parallel.failed={0=[2]}"
                   " --set parallel.batch_policy=fixed"},
        VerifyCase{"slot2_lost_proportional",
                   "--set parallel.dp=2 --set parallel.tp=4 --set parallel.failed={0=[2]}"
                   " --set parallel.batch_policy=proportional"},
        VerifyCase{"two_degraded_replicas",
                   "--set parallel.dp=3 --set parallel.tp=4 --set train.global_batch=12"
                   " --set 'parallel.failed={0=[1],2=[0,3]}'"},
        VerifyCase{"indivisible_heads_and_neurons",
                   "--set parallel.dp=2 --set parallel.tp=4 --set model.d_model=80"
                   " --set model.heads=5 --set parallel.failed={1=[1]}"},
        VerifyCase{"constant_global",
                   "--set parallel.dp=3 --set parallel.tp=4 --set train.global_batch=12"
                   " --set parallel.failed={1=[3]} --set parallel.batch_policy=constant-global"}),
    [](const ::testing::TestParamInfo<VerifyCase>& param_info) { return std::string(param_info.param.name); });

TEST_F(CliTest, VerifyCatchesAMisPairedUnitInTheReshard) {
  int code = -1;
  const std::string line =
      train_and_verify(dir_, "--set parallel.dp=2 --set parallel.tp=4 --set parallel.failed={0=[2]}",
                       &code, "NTP_TEST_MISPAIR_RANK=0");
  EXPECT_EQ(code, 1) << line;
  EXPECT_NE(line.find("\"verify\":\"fail\""), std::string::npos) << line;
}

TEST_F(CliTest, TrainRejectsABadConfigBeforeStartingAnything) {
  const CommandResult run =
      ntp("train --run-dir " + dir_.string() + " --set parallel.dp=2 --set parallel.failed={5=[0]}");
  EXPECT_EQ(run.code, 2) << run.output;
  EXPECT_NE(run.output.find("parallel.failed"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("replica 5"), std::string::npos) << run.output;
  EXPECT_FALSE(fs::exists(dir_)) << "nothing may be created for a rejected configuration";
  const CommandResult unknown = ntp("train --run-dir " + dir_.string() + " --set train.stepz=3");
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.output.find("train.stepz"), std::string::npos) << unknown.output;
}

// A pipeline's configuration errors are refused before anything starts.
TEST_F(CliTest, TrainRefusesABadPipelineNamingTheKey) {
  const CommandResult stage = ntp("train --run-dir " + dir_.string() + " --set parallel.pp=2 --set 'parallel.failed={0={2=[0]}}'");
  EXPECT_EQ(stage.code, 2) << stage.output;
  EXPECT_NE(stage.output.find("stage 2 does not exist (parallel.pp = 2)"), std::string::npos) << stage.output;
  const CommandResult deep = ntp("train --run-dir " + dir_.string() + " --set parallel.pp=3");
  EXPECT_EQ(deep.code, 2) << deep.output;
  EXPECT_NE(deep.output.find("parallel.pp must be in [1, layers = 2]"), std::string::npos) << deep.output;
  EXPECT_FALSE(fs::exists(dir_)) << "nothing may be created for a refused configuration";
}

TEST_F(CliTest, TrainWritesEveryRunFile) {
  int code = -1;
  train_and_verify(dir_, "--set parallel.dp=2 --set parallel.tp=2", &code);
  ASSERT_EQ(code, 0);
  for (const char* name : {"config.toml", "metrics.jsonl", "schedule.jsonl", "events.jsonl",
                           "trace.json", "summary.json", "model.bin", "logs/rank-3.log"}) {
    EXPECT_TRUE(fs::exists(dir_ / name)) << name;
  }
}

}  // namespace

namespace {

TEST_F(CliTest, TrainMetricsDescribeADegradedJob) {
  int code = -1;
  train_and_verify(dir_, "--set parallel.dp=2 --set parallel.tp=4 --set parallel.failed={0=[2]}", &code);
  ASSERT_EQ(code, 0);
  std::ifstream in(dir_ / "metrics.jsonl");
  std::string line;
  int steps = 0;
  while (std::getline(in, line)) {
    const nlohmann::json m = nlohmann::json::parse(line);
    EXPECT_EQ(m["samples"], nlohmann::json::parse("[3, 5]")) << line;  // 8 x 3/7 -> 3, rest 5
    EXPECT_EQ(m["tp"], nlohmann::json::parse("[3, 4]")) << line;
    EXPECT_EQ(m["tokens"], 8 * 32) << line;
    EXPECT_GT(m["reshard_bytes"].get<double>(), 0) << "replica 1 has an extra slot: " << line;
    EXPECT_GT(m["allreduce_bytes"].get<double>(), m["reshard_bytes"].get<double>()) << line;
    EXPECT_GE(m["step_time_s"].get<double>(), m["exposed_sync_s"].get<double>()) << line;
    EXPECT_GE(m["sync_wait_max_s"].get<double>(), m["exposed_sync_s"].get<double>()) << line;
    ++steps;
  }
  EXPECT_EQ(steps, 3);
}

// A straggler that sleeps in every update, the metrics writer (rank 0) or
// another rank: the next commit waits for it, so every step after the first
// takes at least the sleep, and the steps add up to the wall time between
// the logged steps. (Timing the writer's own update on top of the slowest
// rank's time to the commit counts a slow writer twice.)
TEST_F(CliTest, StepTimeIsTheSlowestRanksWholeStep) {
  constexpr double kSleep = 0.4;
  for (const int slow : {0, 3}) {
    SCOPED_TRACE("slow rank " + std::to_string(slow));
    fs::remove_all(dir_);
    int code = -1;
    const std::string line = train_and_verify(
        dir_, "--set parallel.dp=2 --set parallel.tp=2 --set train.steps=4", &code,
        "NTP_TEST_MUTATIONS=1 NTP_TEST_SLOW_UPDATE=" + std::to_string(slow) + ":" + std::to_string(kSleep));
    ASSERT_EQ(code, 0) << line;
    const std::vector<nlohmann::json> metrics = read_lines(dir_ / "metrics.jsonl");
    ASSERT_EQ(metrics.size(), 4u);
    for (std::size_t s = 1; s < metrics.size(); ++s) {
      const double step_s = metrics[s]["step_time_s"].get<double>();
      const double wall_s = metrics[s]["time"].get<double>() - metrics[s - 1]["time"].get<double>();
      EXPECT_GE(step_s, kSleep) << metrics[s].dump();
      EXPECT_NEAR(step_s, wall_s, kSleep / 4) << metrics[s].dump();
    }
  }
}

// A worker killed mid-run: ntp train names it and its signal, stops the
// others, and exits 1, well within the deadlines.
TEST_F(CliTest, TrainReportsAKilledWorker) {
  const KilledRun run = train_and_kill_rank(
      dir_, "--set parallel.dp=2 --set parallel.tp=2 --set deadline.collective_s=5"
            " --set deadline.straggler_s=1", 2);
  EXPECT_EQ(run.code, 1) << run.output;
  EXPECT_NE(run.output.find("rank 2 (pid"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("killed by signal 9"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("first failure: rank 2"), std::string::npos) << run.output;
  EXPECT_LT(run.seconds, 30.0) << "the other workers must not hang";
}

}  // namespace

namespace {

std::vector<nlohmann::json> events_named(const fs::path& dir, const std::string& name) {
  std::vector<nlohmann::json> out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string file = entry.path().filename().string();
    if (!file.starts_with("events")) continue;
    for (const nlohmann::json& e : read_lines(entry.path())) {
      if (e["event"] == name) out.push_back(e);
    }
  }
  return out;
}

// `ntp train` of a small job with elastic.recover on; `sets` adds the job,
// the failure to inject and flags.
CommandResult train_recovering(const fs::path& dir, const std::string& sets) {
  return ntp("train --run-dir " + dir.string() +
             " --set model.layers=1 --set model.seq_len=32 --set train.micro_batch=2"
             " --set deadline.collective_s=10 --set elastic.recover=true --set elastic.settle_s=0.2 " +
             sets);
}

// In-job recovery: rank 1 (replica 0, slot 1) kills itself at the start of
// step 3 of 8. The survivors agree on epoch 1, replica 0 goes on at TP 1 with
// slot 1's units pulled from replica 1, step 3 is redone, and the run still
// matches the single-process replay of what schedule.jsonl says was trained.
TEST_F(CliTest, TrainRecoversFromAKilledWorkerAndStillVerifies) {
  const CommandResult run = train_recovering(
      dir_, "--set parallel.dp=2 --set parallel.tp=2 --set train.steps=8"
            " --set test.kill_rank=1 --set test.kill_at_step=3 --verify");
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_NE(run.output.find("verify: pass — "), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("rank 1 (pid"), std::string::npos) << "the death is reported: " << run.output;

  const std::vector<nlohmann::json> metrics = read_lines(dir_ / "metrics.jsonl");
  ASSERT_EQ(metrics.size(), 8u);
  for (const nlohmann::json& m : metrics) {
    const bool before = m["step"].get<int>() < 3;
    EXPECT_EQ(m["tp"], nlohmann::json::parse(before ? "[2, 2]" : "[1, 2]")) << m.dump();
    // proportional: 8 sequences split 1:2 after the failure
    EXPECT_EQ(m["samples"], nlohmann::json::parse(before ? "[4, 4]" : "[3, 5]")) << m.dump();
  }
  const std::vector<nlohmann::json> schedule = read_lines(dir_ / "schedule.jsonl");
  ASSERT_EQ(schedule.size(), 8u);
  EXPECT_EQ(schedule[3]["step"], 3);
  EXPECT_EQ(schedule[3]["samples"][0].size(), 3u) << "the redone step logs the new split";

  const fs::path events = dir_ / "events.jsonl";
  ASSERT_TRUE(fs::exists(events));
  EXPECT_EQ(events_named(dir_, "failure_injected").size(), 1u);
  const auto detected = events_named(dir_, "failure_detected");
  const auto agreed = events_named(dir_, "membership_agreed");
  const auto moved = events_named(dir_, "state_transferred");
  const auto resumed = events_named(dir_, "step_resumed");
  EXPECT_EQ(detected.size(), 3u) << "every survivor detects the failure";
  ASSERT_EQ(agreed.size(), 3u);
  for (const nlohmann::json& e : agreed) {
    EXPECT_EQ(e["epoch"], 1);
    EXPECT_EQ(e["survivors"], nlohmann::json::parse("[0, 2, 3]"));
    EXPECT_EQ(e["lost"], nlohmann::json::parse("[1]"));
  }
  std::int64_t units_in = 0;
  for (const nlohmann::json& e : moved) {
    units_in += e["units_in"].get<std::int64_t>();
    if (e["rank"] == 0) {
      EXPECT_GT(e["bytes_in"].get<std::int64_t>(), 0) << e.dump();
    }
  }
  EXPECT_GT(units_in, 0);
  ASSERT_EQ(resumed.size(), 3u);
  for (const nlohmann::json& e : resumed) {
    EXPECT_EQ(e["step"], 3);
    EXPECT_LT(e["recovery_s"].get<double>(), 20.0) << e.dump();
  }
  std::ifstream summary_file(dir_ / "summary.json");
  const nlohmann::json summary = nlohmann::json::parse(summary_file);
  ASSERT_EQ(summary["recoveries"].size(), 1u) << summary.dump();
  EXPECT_EQ(summary["recoveries"][0]["lost"], nlohmann::json::parse("[1]"));
  EXPECT_EQ(summary["recoveries"][0]["step"], 3);
  EXPECT_GT(summary["recoveries"][0]["recovery_s"].get<double>(), 0.0);
  EXPECT_NE(run.output.find("recovered: lost ranks [1], step 3 redone at tp [1,2]"), std::string::npos)
      << run.output;
}

// More failures recovered in-job, each checked against the single-process replay.
struct RecoveryCase {
  const char* name;
  std::string sets;
  const char* survivors;  // published in epoch 1
  const char* final_tp;   // metrics after the failure
  const char* final_samples;
};

void PrintTo(const RecoveryCase& c, std::ostream* os) { *os << c.name; }

class TrainRecoveryTest : public CliTest, public ::testing::WithParamInterface<RecoveryCase> {};

TEST_P(TrainRecoveryTest, FinishesAndMatchesTheReplay) {
  const RecoveryCase& c = GetParam();
  const CommandResult run =
      train_recovering(dir_, "--set train.steps=6 --set test.kill_at_step=2 " + c.sets + " --verify");
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_NE(run.output.find("verify: pass — "), std::string::npos) << run.output;
  const std::vector<nlohmann::json> metrics = read_lines(dir_ / "metrics.jsonl");
  ASSERT_EQ(metrics.size(), 6u);
  EXPECT_EQ(metrics.back()["tp"], nlohmann::json::parse(c.final_tp));
  EXPECT_EQ(metrics.back()["samples"], nlohmann::json::parse(c.final_samples));
  const auto agreed = events_named(dir_, "membership_agreed");
  ASSERT_FALSE(agreed.empty());
  for (const nlohmann::json& e : agreed) EXPECT_EQ(e["survivors"], nlohmann::json::parse(c.survivors));
}

INSTANTIATE_TEST_SUITE_P(
    Failures, TrainRecoveryTest,
    ::testing::Values(
        // Rank 0 (core slot 0 of replica 0, and the writer) dies: rank 1 takes over the files.
        RecoveryCase{"core_slot0_and_writer", "--set parallel.dp=2 --set parallel.tp=2 --set test.kill_rank=0",
                     "[1, 2, 3]", "[1, 2]", "[3, 5]"},
        // TP 4: replica 0 goes on at TP 3; K = 3 reshapes replica 1's layout too.
        RecoveryCase{"tp4_to_tp3", "--set parallel.dp=2 --set parallel.tp=4 --set test.kill_rank=2",
                     "[0, 1, 3, 4, 5, 6, 7]", "[3, 4]", "[3, 5]"},
        // parallel.min_tp = 2: replica 0 stops training, its survivor leaves with exit 0.
        RecoveryCase{"replica_dropped_by_min_tp",
                     "--set parallel.dp=2 --set parallel.tp=2 --set parallel.min_tp=2 --set test.kill_rank=1",
                     "[0, 2, 3]", "[1, 2]", "[0, 8]"}),
    [](const ::testing::TestParamInfo<RecoveryCase>& param_info) { return std::string(param_info.param.name); });

// Two failures in sequence: rank 2 kills itself at step 3 (epoch 1), then,
// once training has resumed, rank 5 is SIGKILLed from outside wherever it is
// in its step, after step 4 committed (epoch 2). Both replicas end at TP 3
// and the run still verifies.
TEST_F(CliTest, TrainRecoversFromTwoFailuresInSequence) {
  std::thread killer([&] {
    for (int i = 0; i < 1200; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
      // Every survivor resumed and step 4 committed: the first recovery is over.
      if (!fs::exists(dir_ / "metrics.jsonl") || read_lines(dir_ / "metrics.jsonl").size() < 5) continue;
      for (const nlohmann::json& e : events_named(dir_, "worker_started")) {
        if (e["rank"] == 5) ::kill(e["pid"].get<int>(), SIGKILL);
      }
      return;
    }
  });
  const CommandResult run = train_recovering(
      dir_, "--set parallel.dp=2 --set parallel.tp=4 --set train.steps=40 --set run.trace_steps=0"
            " --set test.kill_rank=2 --set test.kill_at_step=3 --verify");
  killer.join();
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_NE(run.output.find("verify: pass — "), std::string::npos) << run.output;
  std::ifstream summary_file(dir_ / "summary.json");
  const nlohmann::json recoveries = nlohmann::json::parse(summary_file)["recoveries"];
  ASSERT_EQ(recoveries.size(), 2u) << recoveries.dump() << "\n" << run.output;
  EXPECT_EQ(recoveries[0]["lost"], nlohmann::json::parse("[2]"));
  EXPECT_EQ(recoveries[1]["lost"], nlohmann::json::parse("[5]"));
  EXPECT_EQ(recoveries[1]["epoch"], 2);
  EXPECT_EQ(read_lines(dir_ / "metrics.jsonl").back()["tp"], nlohmann::json::parse("[3, 3]"));
}

// Where the kernel says thread `pid` sleeps ("hrtimer_nanosleep", "0" when it
// does not say); empty once the process is gone.
std::string wait_channel(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/wchan");
  std::string channel;
  std::getline(in, channel);
  return channel;
}

// A rank signalled from outside while it is inside its update: after the
// commit collective, before its optimizer has run. NTP_TEST_SLOW_UPDATE makes
// that rank sleep 1 s at the start of every update, and the signal waits
// until /proc shows its main thread in that sleep, once training is under way.
// The other ranks applied the step; recovery resumes after it (the victim's
// replica takes the lost units from the peer replica) and the run still
// verifies. SIGKILL on a rank of replica 1, SIGSTOP (fenced by the launcher)
// on the writer, rank 0.
TEST_F(CliTest, TrainRecoversFromASignalWhileARankIsInItsUpdate) {
  struct Case {
    int rank;
    int sig;
  };
  for (const Case c : {Case{3, SIGKILL}, Case{0, SIGSTOP}}) {
    SCOPED_TRACE("rank " + std::to_string(c.rank) + (c.sig == SIGKILL ? " SIGKILL" : " SIGSTOP"));
    fs::remove_all(dir_);
    std::string landed;  // the victim's wait channel when it was signalled
    std::thread signaller([&] {
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      int pid = -1;
      while (std::chrono::steady_clock::now() < give_up) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        try {  // a file read while a line is half written parses next time
          if (pid < 0) {
            if (!fs::exists(dir_ / "events.jsonl")) continue;
            for (const nlohmann::json& e : events_named(dir_, "worker_started"))
              if (e["rank"] == c.rank) pid = e["pid"].get<int>();
            continue;
          }
          if (!fs::exists(dir_ / "metrics.jsonl") || read_lines(dir_ / "metrics.jsonl").size() < 3) continue;
        } catch (const nlohmann::json::exception&) {
          continue;
        }
        const std::string channel = wait_channel(pid);
        if (channel.find("nanosleep") == std::string::npos && channel != "0") continue;
        landed = channel;
        ::kill(pid, c.sig);
        return;
      }
    });
    const CommandResult run = ntp_with_env(
        "NTP_TEST_MUTATIONS=1 NTP_TEST_SLOW_UPDATE=" + std::to_string(c.rank) + ":1.0",
        "train --run-dir " + dir_.string() +
            " --set model.layers=1 --set model.seq_len=32 --set train.micro_batch=2 --set deadline.collective_s=10"
            " --set elastic.recover=true --set elastic.settle_s=0.2 --set deadline.heartbeat_s=1.5"
            " --set parallel.dp=2 --set parallel.tp=2 --set train.steps=8 --set run.trace_steps=0 --verify");
    signaller.join();
    ASSERT_FALSE(landed.empty()) << "rank " << c.rank << " was never seen in its update\n" << run.output;
    ASSERT_EQ(run.code, 0) << "signalled in " << landed << "\n" << run.output;
    EXPECT_NE(run.output.find("verify: pass — "), std::string::npos) << run.output;
    std::ifstream summary_file(dir_ / "summary.json");
    const nlohmann::json recoveries = nlohmann::json::parse(summary_file)["recoveries"];
    ASSERT_EQ(recoveries.size(), 1u) << recoveries.dump() << "\n" << run.output;
    EXPECT_EQ(recoveries[0]["lost"], nlohmann::json::array({c.rank}));
    const std::vector<nlohmann::json> metrics = read_lines(dir_ / "metrics.jsonl");
    ASSERT_EQ(metrics.size(), 8u);
    for (std::size_t s = 0; s < metrics.size(); ++s) EXPECT_EQ(metrics[s]["step"], s) << "a step lost or repeated";
  }
}

// One replica: the dead slot's units exist nowhere else. The survivor says so
// and the run stops (exit 3: in-job recovery is impossible) instead of
// training on lost state.
TEST_F(CliTest, RecoveryWithoutAPeerReplicaFailsNamingTheLostUnits) {
  const CommandResult run = train_recovering(
      dir_, "--set parallel.dp=1 --set parallel.tp=2 --set train.steps=4 --set test.kill_rank=1"
            " --set test.kill_at_step=1");
  EXPECT_EQ(run.code, 3) << run.output;
  std::ifstream log(dir_ / "logs" / "rank-0.log");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("replica 0 would lose"), std::string::npos) << text;
}

TEST_F(CliTest, TrainRejectsAJobItCannotLayOutBeforeStartingWorkers) {
  // The tiny preset has 4 heads: 8 slots per replica cannot each hold one.
  const CommandResult heads = ntp("train --run-dir " + dir_.string() +
                                  " --set parallel.tp=8 --set parallel.dp=1");
  EXPECT_EQ(heads.code, 2) << heads.output;
  EXPECT_NE(heads.output.find("parallel.tp"), std::string::npos) << heads.output;
  EXPECT_NE(heads.output.find("heads"), std::string::npos) << heads.output;
  EXPECT_FALSE(fs::exists(dir_));
  // Byte text needs a vocabulary of 256.
  const CommandResult vocab = ntp("train --run-dir " + dir_.string() +
                                  " --set model.vocab=100 --set parallel.tp=2");
  EXPECT_EQ(vocab.code, 2) << vocab.output;
  EXPECT_NE(vocab.output.find("model.vocab"), std::string::npos) << vocab.output;
  EXPECT_FALSE(fs::exists(dir_));
}

}  // namespace

namespace {

// power.mode = "simulated" end to end: every rank plans the same, the ranks of
// the degraded replica set the boost limit and those of the healthy replica
// keep the default; metrics carry the plan each step, the batch shares are
// plan_boost's, --verify still passes, and every rank's limit is back at the
// default when the run ends.
TEST_F(CliTest, SimulatedPowerBoostIsPlannedLoggedAndRestored) {
  int code = -1;
  const std::string line = train_and_verify(
      dir_,
      "--set parallel.dp=2 --set parallel.tp=4 --set parallel.failed={0=[2]}"
      " --set train.global_batch=16 --set power.mode=simulated --set power.tdp_w=700"
      " --set power.max_frac=1.5 --set power.headroom_w=200 --set power.alpha=0.7 --set power.need=modelled",
      &code);
  ASSERT_EQ(code, 0) << line;
  // The modelled need of the tiny model (1 layer, d 64, T 32) at TP 3 of 4: per
  // unit a head does (8 d^2 + 4 T d) / 4 heads, a neuron 4 d, a vocabulary row
  // 2 d, and the busiest GPU holds 2 of 4 heads and 86 of 256 neurons and rows.
  const double need = ntp::power::busiest_work_need({{4, 10240.0}, {256, 256.0}, {256, 128.0}}, 4, 3);
  ASSERT_GT(need, 4.0 / 3.0);
  const ntp::power::BoostPlan plan = ntp::power::plan_boost(
      4, {3, 4}, {need, 1.0}, 200.0, 16, ntp::power::DevicePowerModel{700.0, 1.5, 0.7});
  ASSERT_GT(plan.replicas[0].limit_w, 700.0);  // the degraded replica is boosted
  ASSERT_NE(plan.replicas[0].share, 16 * 3 / 7) << "the boost must change the unboosted split";

  int plans = 0;
  std::set<int> applied;
  std::set<int> restored;
  for (const nlohmann::json& e : read_lines(dir_ / "events.jsonl")) {
    if (e["event"] == "power_plan") {
      ++plans;
      EXPECT_EQ(e["mode"], "simulated");
      ASSERT_EQ(e["replicas"].size(), 2u);
      for (std::size_t r = 0; r < 2; ++r) {
        EXPECT_EQ(e["replicas"][r]["active"], plan.replicas[r].active);
        EXPECT_DOUBLE_EQ(e["replicas"][r]["need"].get<double>(), plan.replicas[r].need);
        EXPECT_EQ(e["replicas"][r]["cap"], ntp::power::to_string(plan.replicas[r].cap));
        EXPECT_DOUBLE_EQ(e["replicas"][r]["limit_w"].get<double>(), plan.replicas[r].limit_w);
        EXPECT_DOUBLE_EQ(e["replicas"][r]["speedup"].get<double>(), plan.replicas[r].speedup);
        EXPECT_EQ(e["replicas"][r]["share"], plan.replicas[r].share);
      }
    } else if (e["event"] == "power_applied") {
      applied.insert(e["rank"].get<int>());
      const auto& planned = plan.replicas[e["replica"].get<std::size_t>()];
      EXPECT_DOUBLE_EQ(e["device_limit_w"].get<double>(), planned.limit_w) << e;
    } else if (e["event"] == "power_restored") {
      restored.insert(e["rank"].get<int>());
      EXPECT_EQ(e["cause"], "exit") << e;
      EXPECT_DOUBLE_EQ(e["device_limit_w"].get<double>(), 700.0) << e;
      EXPECT_DOUBLE_EQ(e["default_limit_w"].get<double>(), 700.0) << e;
    }
  }
  EXPECT_EQ(plans, 1);
  EXPECT_EQ(applied, (std::set<int>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(restored, applied);

  const std::vector<nlohmann::json> metrics = read_lines(dir_ / "metrics.jsonl");
  ASSERT_EQ(metrics.size(), 3u);
  for (const nlohmann::json& m : metrics) {
    EXPECT_EQ(m["samples"], nlohmann::json({plan.replicas[0].share, plan.replicas[1].share})) << m;
    ASSERT_EQ(m["power"].size(), 2u) << m;
    for (std::size_t r = 0; r < 2; ++r) {
      EXPECT_DOUBLE_EQ(m["power"][r]["limit_w"].get<double>(), plan.replicas[r].limit_w);
      EXPECT_DOUBLE_EQ(m["power"][r]["speedup"].get<double>(), plan.replicas[r].speedup);
    }
  }
}

// power.need = "measured": the degraded replica (rank 0, TP 1 of 2) starts
// boosted to its modelled need of 2; its compute is then made FACTOR times a
// healthy replica's per sample at TDP (NTP_TEST_SLOW_COMPUTE, a device whose
// speed follows its limit), and the plan follows the measured ratio down to
// about FACTOR within a few re-plans, the same on every rank, and the run
// still verifies. A tolerance of 10 % (not the default 5 %) keeps the count of
// re-plans a property of the rule, not of a loaded host's step-time noise
// (8 re-plans once, beside the whole suite on 2 cores).
TEST_F(CliTest, SimulatedPowerBoostFollowsTheMeasuredNeed) {
  constexpr double kFactor = 1.2;
  int code = -1;
  const std::string line = train_and_verify(
      dir_,
      "--set parallel.dp=2 --set parallel.tp=2 --set parallel.failed={0=[1]} --set train.steps=12"
      " --set train.global_batch=4 --set power.mode=simulated --set power.max_frac=4"
      " --set power.headroom_w=4000 --set power.need_smoothing=0.5 --set power.need_tolerance=0.1",
      &code, "NTP_TEST_MUTATIONS=1 NTP_TEST_SLOW_COMPUTE=0.25:0:" + std::to_string(kFactor));
  ASSERT_EQ(code, 0) << line;
  EXPECT_NE(line.find("\"verify\":\"pass\""), std::string::npos) << line;
  std::vector<nlohmann::json> plans;
  std::map<int, int> applied;  // rank -> decisions
  for (const nlohmann::json& e : read_lines(dir_ / "events.jsonl")) {
    if (e["event"] == "power_plan") plans.push_back(e);
    if (e["event"] == "power_applied") ++applied[e["rank"].get<int>()];
  }
  ASSERT_GE(plans.size(), 2u) << "no re-plan from the measured times";
  EXPECT_EQ(plans.front()["cause"], "configuration");
  EXPECT_DOUBLE_EQ(plans.front()["replicas"][0]["need"].get<double>(), 2.0);  // modelled: all units on one GPU
  EXPECT_LE(plans.size(), 7u) << "the rule re-plans a few times, it does not chase every step";
  const nlohmann::json& last = plans.back();
  EXPECT_EQ(last["cause"], "measured");
  // The ratio measured includes the CPU's real forward pass, which the boost
  // does not speed up (about 15 ms of TP collectives on the healthy replica
  // against 0.5 s of injected compute): near FACTOR, far from the modelled 2.
  const double need = last["replicas"][0]["need"].get<double>();
  EXPECT_GT(need, kFactor * 0.8) << last;
  EXPECT_LT(need, kFactor * 1.2) << last;
  EXPECT_EQ(last["replicas"][0]["cap"], "none") << last;
  EXPECT_EQ(last["replicas"][1]["need"].get<double>(), 1.0) << last;
  ASSERT_EQ(applied.size(), 3u);
  for (const auto& [rank, count] : applied) EXPECT_EQ(count, static_cast<int>(plans.size())) << "rank " << rank;
}

// A peer dies mid-run: the boosted rank fails in its next collective, and the
// exception path restores its GPU's limit before the process exits.
TEST_F(CliTest, SimulatedPowerLimitIsRestoredAfterAnError) {
  // Rank 0 is replica 0 at TP 1 of 2 (boosted); rank 2 belongs to the healthy replica.
  const KilledRun run = train_and_kill_rank(
      dir_, "--set parallel.dp=2 --set parallel.tp=2 --set parallel.failed={0=[1]}"
            " --set power.mode=simulated --set deadline.collective_s=3 --set deadline.straggler_s=20",
      2);
  EXPECT_EQ(run.code, 1) << run.output;
  EXPECT_NE(run.output.find("rank 2 (pid"), std::string::npos) << run.output;
  bool boosted = false;
  bool restored = false;
  for (const nlohmann::json& e : read_lines(dir_ / "events.jsonl")) {
    if (e["event"] == "power_applied" && e["rank"] == 0) {
      boosted = e["device_limit_w"].get<double>() > 1000.0;
    }
    if (e["event"] == "power_restored" && e["rank"] == 0) {
      EXPECT_EQ(e["cause"], "error") << e;
      EXPECT_DOUBLE_EQ(e["device_limit_w"].get<double>(), 1000.0) << e;
      restored = true;
    }
  }
  EXPECT_TRUE(boosted) << "replica 0 runs at TP 1 of 2: its GPU is boosted";
  EXPECT_TRUE(restored) << "rank 0 logged no power_restored event";
}

TEST_F(CliTest, PowerOffLogsNoPowerDecisions) {
  int code = -1;
  train_and_verify(dir_, "--set parallel.dp=2 --set parallel.tp=2 --set parallel.failed={0=[1]}",
                   &code);
  ASSERT_EQ(code, 0);
  for (const nlohmann::json& m : read_lines(dir_ / "metrics.jsonl")) EXPECT_FALSE(m.contains("power"));
  for (const nlohmann::json& e : read_lines(dir_ / "events.jsonl")) {
    EXPECT_EQ(e["event"].get<std::string>().rfind("power_", 0), std::string::npos) << e;
  }
}

// power.mode = "nvml" on a host without NVML: a clear error naming the key,
// before anything starts; exit 1 (the configuration is valid, the host
// cannot carry it out).
TEST_F(CliTest, NvmlPowerWithoutNvmlFailsBeforeTraining) {
  if (void* nvml = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL)) {
    ::dlclose(nvml);
    GTEST_SKIP() << "this host has NVML";
  }
  const CommandResult run = ntp("train --run-dir " + dir_.string() +
                                " --set parallel.dp=2 --set parallel.tp=2 --set power.mode=nvml");
  EXPECT_EQ(run.code, 1) << run.output;
  EXPECT_NE(run.output.find("power.mode = \"nvml\": NVML not available"), std::string::npos)
      << run.output;
  EXPECT_FALSE(fs::exists(dir_)) << "nothing may start without the power control it asks for";
}

}  // namespace
