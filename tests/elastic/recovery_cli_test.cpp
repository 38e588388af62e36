// In-job recovery tried from the outside: real signals (SIGKILL, SIGSTOP) at
// every phase of a step, during a recovery, to the writer, before the first
// step, several at once and at random; each run must end — under a hard time
// limit that names what stalled — either trained and verified against the
// single-process replay, with one log row per step and the replicas proven
// identical, or stopped cleanly with a message.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "tests/comm/redis_server.h"
#include "run_files.h"

namespace {

namespace fs = std::filesystem;

constexpr int kTimeLimitS = 150;

struct TrainRun {
  int code = -1;       // 137: killed at the time limit
  std::string output;  // stdout and stderr
};

// `ntp train` of a dp x tp job on the test model under `timeout`: a run that
// stalls is killed and reported as such. `env`: VAR=value ... for the command.
TrainRun train(const fs::path& dir, const std::string& sets, const std::string& env = "") {
  const ntp::testing::CliRun r = ntp::testing::run_cli(
      env + " timeout -s KILL " + std::to_string(kTimeLimitS) + " " + std::string(NTP_BINARY),
      "train --run-dir " + dir.string() +
          " --set model.layers=1 --set model.seq_len=32 --set train.micro_batch=2 --set run.trace_steps=0"
          " --set elastic.recover=true --set deadline.collective_s=10"
          " --set deadline.rendezvous_s=30 --set deadline.heartbeat_s=1.5 --set train.global_batch=8 " +
          sets + " --verify");
  return {r.exit_code, r.out + r.err};
}

using ntp::testing::events_named;
const auto read_lines = ntp::testing::read_jsonl_lines;

// What a stalled run was doing: the last events of each rank.
std::string stall_report(const fs::path& dir) {
  std::string text = "ntp train did not end within " + std::to_string(kTimeLimitS) + " s; last events:\n";
  const std::vector<nlohmann::json> events = read_lines(dir / "events.jsonl");
  for (std::size_t i = events.size() > 15 ? events.size() - 15 : 0; i < events.size(); ++i) {
    text += events[i].dump() + "\n";
  }
  return text;
}

class RecoveryCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A parameterised test's name has a '/': one directory, not a nested one.
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ = fs::temp_directory_path() / ("ntp_recovery_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(dir_);
  }
  void TearDown() override {
    if (HasFailure()) return;  // kept for the report
    fs::remove_all(dir_);
    fs::remove(dir_.string() + ".out");
  }

  // The run trained every step once and verified; the replicas were proven
  // identical after every recovery.
  void expect_recovered(const TrainRun& run, int steps) {
    ASSERT_NE(run.code, 137) << stall_report(dir_);
    ASSERT_EQ(run.code, 0) << run.output;
    EXPECT_NE(run.output.find("verify: pass — "), std::string::npos) << run.output;
    for (const char* file : {"metrics.jsonl", "schedule.jsonl"}) {
      const std::vector<nlohmann::json> rows = read_lines(dir_ / file);
      ASSERT_EQ(rows.size(), static_cast<std::size_t>(steps)) << file << "\n" << run.output;
      for (int s = 0; s < steps; ++s) EXPECT_EQ(rows[static_cast<std::size_t>(s)]["step"], s) << file;
    }
    EXPECT_FALSE(events_named(dir_, "step_resumed").empty()) << run.output;
    std::set<std::int64_t> proven;
    for (const nlohmann::json& e : events_named(dir_, "replicas_agree")) proven.insert(e["epoch"].get<std::int64_t>());
    for (const nlohmann::json& e : events_named(dir_, "step_resumed")) {
      EXPECT_TRUE(proven.contains(e["epoch"].get<std::int64_t>())) << "no proof of agreement: " << e.dump();
    }
    std::ifstream summary(dir_ / "summary.json");
    ASSERT_TRUE(summary) << run.output;
    EXPECT_EQ(nlohmann::json::parse(summary)["status"], "finished");
  }

  // Random failures may leave some unit without a holder: then a clean stop
  // naming it (exit 3), else a recovered, verified run.
  void expect_recovered_or_stopped(const TrainRun& run, int steps) {
    ASSERT_NE(run.code, 137) << stall_report(dir_);
    if (run.code == 3) {
      EXPECT_NE(run.output.find("in-job recovery is impossible"), std::string::npos) << run.output;
      return;
    }
    expect_recovered(run, steps);
  }

  fs::path dir_;
};

struct FaultCase {
  const char* name;
  std::string sets;
};

void PrintTo(const FaultCase& c, std::ostream* os) { *os << c.name; }

class RecoveryFaultTest : public RecoveryCliTest, public ::testing::WithParamInterface<FaultCase> {};

TEST_P(RecoveryFaultTest, RecoversAndVerifies) {
  const TrainRun run = train(dir_, "--set train.steps=6 " + GetParam().sets);
  expect_recovered(run, 6);
  EXPECT_FALSE(events_named(dir_, "failure_injected").empty()) << run.output;
}

// dp 2 x tp 2: ranks 0-1 are replica 0, ranks 2-3 replica 1; rank 0 writes.
INSTANTIATE_TEST_SUITE_P(
    Phases, RecoveryFaultTest,
    ::testing::Values(
        FaultCase{"kill_at_start", "--set parallel.dp=2 --set parallel.tp=2 --set 'test.failures=\"1@2:start\"'"},
        FaultCase{"kill_in_forward", "--set parallel.dp=2 --set parallel.tp=2 --set 'test.failures=\"3@2:forward\"'"},
        FaultCase{"kill_in_backward", "--set parallel.dp=2 --set parallel.tp=2 --set 'test.failures=\"2@2:backward\"'"},
        FaultCase{"kill_in_sync", "--set parallel.dp=2 --set parallel.tp=2 --set 'test.failures=\"1@2:sync\"'"},
        // After the commit collective, before the update: the others applied step 2.
        FaultCase{"kill_in_commit", "--set parallel.dp=2 --set parallel.tp=2 --set 'test.failures=\"3@2:commit\"'"},
        FaultCase{"kill_in_optimizer", "--set parallel.dp=2 --set parallel.tp=2 --set 'test.failures=\"1@2:optimizer\"'"},
        // The writer dies right after the commit: the next writer logs step 2.
        FaultCase{"writer_killed_in_commit", "--set parallel.dp=2 --set parallel.tp=2 --set 'test.failures=\"0@2:commit\"'"},
        FaultCase{"death_at_step_0", "--set parallel.dp=2 --set parallel.tp=2 --set 'test.failures=\"2@0:start\"'"},
        // A partial commit: rank 1 misses the commit of step 2 that the others
        // applied; it is rolled forward from replica 1 (nobody died).
        FaultCase{"behind_after_a_partial_commit",
                  "--set parallel.dp=2 --set parallel.tp=2 --set 'test.failures=\"1@2:commit:LAG\"'"},
        // The same while rank 2 dies: rank 1's units come from rank 3, rank 2's from rank 0.
        FaultCase{"behind_and_a_death",
                  "--set parallel.dp=2 --set parallel.tp=2 --set 'test.failures=\"1@2:commit:LAG; 2@2:commit\"'"},
        // Stopped, not dead: the launcher's heartbeat check fences it.
        FaultCase{"stop_in_forward", "--set parallel.dp=2 --set parallel.tp=2 --set 'test.failures=\"1@2:forward:STOP\"'"},
        FaultCase{"stop_in_sync", "--set parallel.dp=2 --set parallel.tp=2 --set 'test.failures=\"3@2:sync:STOP\"'"},
        FaultCase{"stop_in_commit", "--set parallel.dp=2 --set parallel.tp=2 --set 'test.failures=\"2@2:commit:STOP\"'"},
        // Wedged, heartbeat still beating: the collective deadline finds it, the
        // survivors' agreement declares it lost and the launcher fences it.
        FaultCase{"hang_in_backward",
                  "--set parallel.dp=2 --set parallel.tp=2 --set deadline.collective_s=3 --set deadline.rendezvous_s=8"
                  " --set 'test.failures=\"2@2:backward:HANG\"'"},
        // A second death while the survivors recover from the first.
        FaultCase{"death_during_recovery",
                  "--set parallel.dp=2 --set parallel.tp=4 --set 'test.failures=\"1@2:forward; 6@2:recovery\"'"},
        // Rank 0 — the lowest survivor, the writer, the rank that would lead
        // a leader-based agreement — dies inside the recovery from rank 1's death.
        FaultCase{"lowest_survivor_dies_in_recovery",
                  "--set parallel.dp=2 --set parallel.tp=4 --set 'test.failures=\"1@2:backward; 0@2:recovery\"'"},
        // One slot in each replica, in the same step.
        FaultCase{"one_slot_in_each_replica",
                  "--set parallel.dp=2 --set parallel.tp=2 --set 'test.failures=\"1@3:sync; 2@3:sync\"'"},
        // Two slots of one replica at once: TP 4 -> 2.
        FaultCase{"two_slots_of_one_replica",
                  "--set parallel.dp=2 --set parallel.tp=4 --set 'test.failures=\"1@3:backward; 2@3:backward\"'"},
        // Every slot of replica 1 lost: it sits out, replica 0 trains on.
        FaultCase{"whole_replica_lost",
                  "--set parallel.dp=2 --set parallel.tp=2 --set 'test.failures=\"2@3:forward; 3@3:forward\"'"}),
    [](const ::testing::TestParamInfo<FaultCase>& param_info) { return std::string(param_info.param.name); });

TEST_F(RecoveryCliTest, ChaosOfFiveFailuresRecoversOrStopsCleanly) {
  expect_recovered_or_stopped(train(dir_, "--set train.steps=8 --set parallel.dp=3 --set parallel.tp=2 --set test.chaos=5"
                                         " --set test.chaos_seed=7"),
                              8);
}

// Pipeline stages (docs/pipeline.md): dp 2 x pp 2 x tp 2 over 2 blocks has
// ranks 0-1 (replica 0, stage 0), 2-3 (replica 0, stage 1), 4-5 and 6-7 (replica
// 1); dp 2 x pp 3 x tp 2 over 3 blocks puts replica 0's stages at ranks 0-1,
// 2-3, 4-5 and replica 1's at 6-7, 8-9, 10-11. A lost rank's units come from
// the same stage of the other replica; its stage runs at TP 1 and the other
// stages keep their state.
const std::string kPp2 = "--set model.layers=2 --set parallel.dp=2 --set parallel.pp=2 --set parallel.tp=2 ";
const std::string kPp3 = "--set model.layers=3 --set parallel.dp=2 --set parallel.pp=3 --set parallel.tp=2 ";

INSTANTIATE_TEST_SUITE_P(
    Pipeline, RecoveryFaultTest,
    ::testing::Values(
        FaultCase{"first_stage_killed_in_forward", kPp2 + "--set 'test.failures=\"4@2:forward\"'"},
        FaultCase{"first_stage_stopped_in_backward", kPp2 + "--set 'test.failures=\"1@2:backward:STOP\"'"},
        FaultCase{"first_stage_killed_in_commit", kPp2 + "--set 'test.failures=\"5@2:commit\"'"},
        FaultCase{"middle_stage_killed_in_forward", kPp3 + "--set 'test.failures=\"9@2:forward\"'"},
        FaultCase{"middle_stage_stopped_in_commit", kPp3 + "--set 'test.failures=\"8@2:commit:STOP\"'"},
        // Stage 1 of replica 0 and stage 2 of replica 1 in the same step.
        FaultCase{"middle_and_last_stage_of_two_replicas", kPp3 + "--set 'test.failures=\"3@2:backward; 10@2:forward\"'"},
        FaultCase{"last_stage_killed_in_backward", kPp2 + "--set 'test.failures=\"2@2:backward\"'"},
        FaultCase{"last_stage_stopped_in_forward", kPp2 + "--set 'test.failures=\"6@2:forward:STOP\"'"},
        FaultCase{"last_stage_stopped_in_commit", kPp2 + "--set 'test.failures=\"2@2:commit:STOP\"'"},
        FaultCase{"last_stage_killed_in_sync", kPp2 + "--set 'test.failures=\"3@2:sync\"'"},
        FaultCase{"last_stage_killed_in_optimizer", kPp2 + "--set 'test.failures=\"7@2:optimizer\"'"},
        FaultCase{"writer_killed_in_commit", kPp2 + "--set 'test.failures=\"0@2:commit\"'"},
        // Rank 2 (stage 1) misses the commit the others applied and is rolled
        // forward from stage 1 of replica 1 while rank 4 (stage 0) dies.
        FaultCase{"behind_in_one_stage_and_a_death_in_another",
                  kPp2 + "--set 'test.failures=\"2@2:commit:LAG; 4@2:commit\"'"},
        FaultCase{"death_in_another_stage_during_recovery",
                  kPp2 + "--set 'test.failures=\"6@2:forward; 1@2:recovery\"'"},
        // Both ranks of replica 1's stage 1: the replica sits out, replica 0 trains on.
        FaultCase{"a_whole_stage_of_a_replica_lost", kPp2 + "--set 'test.failures=\"6@3:forward; 7@3:forward\"'"},
        FaultCase{"llama_last_stage_killed_in_backward",
                  kPp2 + "--set model.family=llama --set model.preset=llama-tiny --set model.heads=8"
                         " --set model.kv_heads=4 --set 'test.failures=\"6@2:backward\"'"}),
    [](const ::testing::TestParamInfo<FaultCase>& param_info) { return std::string(param_info.param.name); });

// A rank lost in the validation pass after a step's update (train.eval_every
// 2: passes after steps 1, 3 and 5), without stages and in either stage of a
// pipeline, killed or stopped, the writer too: the job recovers, the step's
// update stands, every step has its row and every due step its validation
// loss (the survivors run the cut pass again; without that, step 3's row
// had none).
TEST_F(RecoveryCliTest, ARankLostInTheValidationPassIsRecovered) {
  fs::create_directories(dir_);
  const fs::path val = dir_.string() + "_val.txt";
  ntp::testing::write_text_data(val, "validation");
  const std::string eval = "--set train.steps=6 --set train.eval_every=2 --set train.eval_batches=2"
                           " --set data.val_path='\"" + val.string() + "\"' ";
  const FaultCase cases[] = {
      {"dp2_tp2_killed", "--set parallel.dp=2 --set parallel.tp=2 --set 'test.failures=\"3@3:validation\"'"},
      {"dp2_tp2_writer_killed", "--set parallel.dp=2 --set parallel.tp=2 --set 'test.failures=\"0@3:validation\"'"},
      {"pp2_last_stage_killed", kPp2 + "--set 'test.failures=\"6@3:validation\"'"},
      {"pp2_first_stage_stopped", kPp2 + "--set 'test.failures=\"1@3:validation:STOP\"'"},
  };
  for (const FaultCase& c : cases) {
    SCOPED_TRACE(c.name);
    fs::remove_all(dir_);
    const TrainRun run = train(dir_, eval + c.sets);
    expect_recovered(run, 6);
    EXPECT_FALSE(events_named(dir_, "failure_injected").empty()) << run.output;
    const std::vector<nlohmann::json> rows = read_lines(dir_ / "metrics.jsonl");
    for (std::size_t s = 0; s < rows.size(); ++s) {
      EXPECT_EQ(rows[s].contains("val_loss"), s % 2 == 1) << "step " << s << ": " << rows[s].dump();
    }
    for (const nlohmann::json& e : events_named(dir_, "step_resumed")) {
      EXPECT_GT(e.value("validation_s", 0.0), 0.0) << "the pass was not run again: " << e.dump();
    }
    if (HasFailure()) return;
  }
  fs::remove(val);
}

// A crash (SIGSEGV, as a faulty driver would raise) is recovered like any
// death, and the dead rank's log says what killed it and where.
TEST_F(RecoveryCliTest, ACrashedRankIsRecoveredAndItsLogHoldsABacktrace) {
  const TrainRun run = train(dir_, "--set train.steps=6 --set parallel.dp=2 --set parallel.tp=2"
                                   " --set 'test.failures=\"2@2:backward:SEGV\"'");
  expect_recovered(run, 6);
  std::ifstream in(dir_ / "logs" / "rank-2.log");
  const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(log.find("rank 2 (pid "), std::string::npos) << log;
  EXPECT_NE(log.find("fatal signal 11 (Segmentation fault)"), std::string::npos) << log;
  EXPECT_NE(log.find("backtrace"), std::string::npos) << log;
  EXPECT_NE(run.output.find("killed by signal 11"), std::string::npos) << run.output;
}

// The same report from a run with no workers (dp 1 x tp 1 trains inside
// `ntp train` itself), sent SIGSEGV from outside.
TEST_F(RecoveryCliTest, ASingleProcessRunThatCrashesSaysWhereOnItsStderr) {
  const fs::path out = dir_.string() + ".out";
  const pid_t pid = ntp::testing::spawn_logged(
      {NTP_BINARY, "train", "--run-dir", dir_.string(), "--set", "model.layers=1", "--set", "model.seq_len=32",
       "--set", "train.steps=100000", "--set", "run.trace_steps=0"},
      out);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (read_lines(dir_ / "metrics.jsonl").empty() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const bool stepped = !read_lines(dir_ / "metrics.jsonl").empty();
  ::kill(pid, stepped ? SIGSEGV : SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  std::ifstream in(out);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fs::remove(out);
  ASSERT_TRUE(stepped) << "no step within 60 s\n" << text;
  ASSERT_TRUE(WIFSIGNALED(status)) << text;
  EXPECT_EQ(WTERMSIG(status), SIGSEGV) << text;
  EXPECT_NE(text.find("ntp (pid " + std::to_string(pid) + "): fatal signal 11 (Segmentation fault)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("backtrace"), std::string::npos) << text;
}

// With elastic.fallback = "stop" the failed run names the newest checkpoint
// it can go on from, in its output and in summary.json.
TEST_F(RecoveryCliTest, AFailureWhereNoHolderIsLeftStopsWithExit3NamingTheUnits) {
  const TrainRun run = train(dir_, "--set train.steps=4 --set parallel.dp=1 --set parallel.tp=2"
                              " --set train.checkpoint_every=1 --set elastic.fallback=\"stop\" --set 'test.failures=\"1@2:forward\"'");
  ASSERT_NE(run.code, 137) << stall_report(dir_);
  EXPECT_EQ(run.code, 3) << run.output;
  EXPECT_NE(run.output.find("replica 0 would lose"), std::string::npos) << run.output;
  std::ifstream summary(dir_ / "summary.json");
  ASSERT_TRUE(summary) << "a failed run still writes summary.json";
  const nlohmann::json s = nlohmann::json::parse(summary);
  EXPECT_EQ(s["status"], "failed");
  ASSERT_TRUE(s.contains("checkpoint")) << s.dump();
  const std::string checkpoint = s["checkpoint"].get<std::string>();
  EXPECT_TRUE(fs::exists(fs::path(checkpoint) / "manifest.json")) << checkpoint;
  EXPECT_NE(run.output.find("the newest checkpoint is " + checkpoint + "; continue with: ntp train --resume " +
                            dir_.string()),
            std::string::npos)
      << run.output;
}

// Rank 1 falls short of the commit of step 2 and rank 3 — the only other
// holder of its units — dies: rank 1's synced gradients of step 2 are final,
// so it completes the update with the outcome the others saw, instead of
// needing a holder at step 2 (which would not exist).
TEST_F(RecoveryCliTest, ARankShortOfTheCommitCompletesItLocally) {
  const TrainRun run = train(dir_, "--set train.steps=6 --set parallel.dp=2 --set parallel.tp=2"
                                   " --set 'test.failures=\"1@2:commit:LAG; 3@2:commit\"'");
  expect_recovered(run, 6);
  const std::vector<nlohmann::json> completed = events_named(dir_, "commit_completed");
  ASSERT_EQ(completed.size(), 1u) << run.output;
  EXPECT_EQ(completed[0]["rank"], 1);
  EXPECT_EQ(completed[0]["step"], 2);
}

// A worker whose heartbeat stops while it still gets CPU (its heartbeat
// thread starved on an oversubscribed host) is not fenced: the launcher sees
// it running, reports it once (rank_starved), and the run trains on with no
// recovery. 40 steps of a wider model keep the run computing well past
// deadline.heartbeat_s (1.5 s) after the beat stops.
TEST_F(RecoveryCliTest, AWorkerWithAStaleHeartbeatThatStillGetsCpuIsNotFenced) {
  const TrainRun run = train(dir_, "--set train.steps=40 --set parallel.dp=2 --set parallel.tp=2"
                                   " --set model.d_model=256 --set 'test.failures=\"1@1:forward:MUTE\"'");
  ASSERT_NE(run.code, 137) << stall_report(dir_);
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_NE(run.output.find("verify: pass — "), std::string::npos) << run.output;
  EXPECT_TRUE(events_named(dir_, "rank_fenced").empty()) << run.output;
  EXPECT_TRUE(events_named(dir_, "step_resumed").empty()) << run.output;
  const std::vector<nlohmann::json> starved = events_named(dir_, "rank_starved");
  ASSERT_EQ(starved.size(), 1u) << run.output;
  EXPECT_EQ(starved[0]["rank"], 1);
  EXPECT_GE(starved[0]["cpu_ticks_since_beat"].get<std::int64_t>(), 0);
}

// A rank cut off from the store, end to end (LAPSE: its lease renewal and
// its beat stop at step 1 while it trains on): it fences itself (exit 4)
// once its lease, 2 x deadline.heartbeat_s = 3 s, is about to end, and
// nobody acts on its absence before that; the others then recover without
// it and the run verifies. 40 steps of a wider model keep the run computing
// well past the lease. Without the lapse reaching the lease (a LAPSE that
// stops only the beat) rank 1 never exits 4 and this fails.
TEST_F(RecoveryCliTest, ARankThatCannotRenewItsLeaseFencesItselfBeforeAnyoneActs) {
  const TrainRun run = train(dir_, "--set train.steps=40 --set parallel.dp=2 --set parallel.tp=2"
                                   " --set model.d_model=256 --set 'test.failures=\"1@1:forward:LAPSE\"'");
  expect_recovered(run, 40);
  const std::vector<nlohmann::json> injected = events_named(dir_, "failure_injected");
  ASSERT_EQ(injected.size(), 1u) << run.output;
  double fenced_at = -1;
  for (const nlohmann::json& e : events_named(dir_, "worker_exited")) {
    if (e["rank"] == 1 && e["exit_code"] == 4) fenced_at = e["time"].get<double>();
  }
  ASSERT_GT(fenced_at, 0) << "rank 1 did not fence itself (exit 4)\n" << run.output;
  // The lease ends 3 s after the last renewal, at most one interval (0.3 s)
  // before the lapse; the rank fences itself a guard G = 0.3 s before that.
  const double lapsed_at = injected[0]["time"].get<double>();
  const double earliest_fence = lapsed_at + 3.0 - 0.3 - 0.3 - 0.1;  // 0.1 s for the clocks' reads
  std::cout << "rank 1 fenced itself " << fenced_at - lapsed_at << " s after its lease renewal stopped\n";
  EXPECT_GE(fenced_at, earliest_fence) << "fenced before its lease could end\n" << run.output;
  EXPECT_LE(fenced_at - lapsed_at, 3.0 + 5.0) << "fenced long after its lease ended\n" << run.output;
  // worker_exited is the launcher's time of reaping the exit, a poll after
  // it, while the survivors hear of the exit at once (its sockets close):
  // so nobody may act before the earliest moment it can fence itself.
  for (const nlohmann::json& e : events_named(dir_, "failure_detected")) {
    EXPECT_GE(e["time"].get<double>(), earliest_fence) << "acted on rank 1 while its lease held: " << e.dump();
  }
}

// The transient case: rank 1 dies at step 2, replica 0 goes on at TP 1; once
// step 4 is logged the launcher starts rank 1 again, it rejoins at a step
// boundary, is rolled forward, and replica 0 is back at TP 2. Still exact.
TEST_F(RecoveryCliTest, ARepairedRankRejoinsAndTheReplicaGoesBackToFullTp) {
  // Enough steps after the repair for the restarted worker to start and join
  // even on a loaded machine (the job does not wait for it: a rejoin that
  // comes after the last step never happens).
  const TrainRun run = train(dir_, "--set train.steps=40 --set parallel.dp=2 --set parallel.tp=2"
                                   " --set 'test.failures=\"1@2:forward\"' --set elastic.rejoin=true"
                                   " --set test.repair_at_step=4");
  expect_recovered(run, 40);
  const std::vector<nlohmann::json> metrics = read_lines(dir_ / "metrics.jsonl");
  EXPECT_EQ(metrics[3]["tp"], nlohmann::json::parse("[1, 2]"));
  EXPECT_EQ(metrics.back()["tp"], nlohmann::json::parse("[2, 2]")) << run.output;
  ASSERT_EQ(events_named(dir_, "rank_rejoined").size(), 1u) << run.output;
  EXPECT_EQ(events_named(dir_, "rank_rejoined")[0]["rank"], 1);
  std::ifstream summary(dir_ / "summary.json");
  const nlohmann::json s = nlohmann::json::parse(summary);
  ASSERT_EQ(s["rejoins"].size(), 1u) << s.dump();
  EXPECT_EQ(s["rejoins"][0]["joined"], nlohmann::json::parse("[1]"));
  EXPECT_GT(s["rejoins"][0]["rejoin_s"].get<double>(), 0.0);
  EXPECT_NE(run.output.find("rejoined: ranks [1]"), std::string::npos) << run.output;
}

// A GPU slow rather than dead (SLOW=3 from step 3, its speed back at step
// 14): the job finds it from the commit records, gives it a smaller shard
// in-job, and gives it a larger one back once its speed returns; the
// training itself is unchanged (--verify).
TEST_F(RecoveryCliTest, ASlowRankGetsASmallerShardInJobAndALargerOneWhenItsSpeedReturns) {
  const TrainRun run = train(dir_, "--set train.steps=30 --set parallel.dp=2 --set parallel.tp=2 --set model.layers=2"
                                   " --set elastic.relayout=true"
                                   " --set 'test.failures=\"1@3:start:SLOW=3; 1@14:start:SLOW=1\"'");
  expect_recovered(run, 30);
  bool cut = false;
  bool back = false;
  for (const nlohmann::json& e : events_named(dir_, "rank_slow")) {
    cut = cut || (e["slow_rank"] == 1 && e["step"].get<int>() < 14 && e["speed"].get<double>() <= 0.6);
  }
  for (const nlohmann::json& e : events_named(dir_, "rank_speed_back")) {
    back = back || (e["slow_rank"] == 1 && e["step"].get<int>() >= 14);
  }
  EXPECT_TRUE(cut) << "rank 1 at a third of its speed was not found slow\n" << run.output;
  EXPECT_TRUE(back) << "rank 1's speed came back but its shard did not\n" << run.output;
  // Replica 0 laid out with slot 1 slower than slot 0 (a loaded machine may
  // add relayouts of its own: busy times are wall times).
  const std::vector<nlohmann::json> relayouts = events_named(dir_, "relayout");
  ASSERT_GE(relayouts.size(), 2u) << run.output;
  EXPECT_EQ(relayouts[0]["from"], "");
  bool weighted = false;
  for (const nlohmann::json& e : relayouts) weighted = weighted || e["speeds"].get<std::string>().starts_with("0:1,0.");
  EXPECT_TRUE(weighted) << run.output;
  for (const nlohmann::json& e : events_named(dir_, "failure_detected")) ADD_FAILURE() << "a relayout is no failure: " << e.dump();
}

// A rank killed or stopped inside a relayout (after its agreement, before the
// state moves): the survivors recover into the next epoch from the layout
// they still hold, keep the speeds the relayout agreed on, and the run
// verifies.
TEST_F(RecoveryCliTest, ARankKilledOrStoppedDuringARelayoutIsRecoveredFrom) {
  for (const char* signal : {"KILL", "STOP"}) {
    SCOPED_TRACE(signal);
    fs::remove_all(dir_);
    const TrainRun run =
        train(dir_, std::string("--set train.steps=24 --set parallel.dp=2 --set parallel.tp=2 --set model.layers=2"
                                " --set elastic.relayout=true --set elastic.slow_steps=2"
                                " --set 'test.failures=\"1@2:start:SLOW=3; 2@3:recovery:") +
                        signal + "\"'");
    expect_recovered(run, 24);
    ASSERT_FALSE(events_named(dir_, "relayout").empty()) << run.output;
    ASSERT_EQ(events_named(dir_, "failure_injected").size(), 2u) << run.output;
    EXPECT_FALSE(events_named(dir_, "failure_detected").empty()) << run.output;
    const std::vector<nlohmann::json> metrics = read_lines(dir_ / "metrics.jsonl");
    EXPECT_EQ(metrics.back()["tp"], nlohmann::json::parse("[2, 1]")) << run.output;
  }
}

// `ntp train` of the test model with `sets` (KEY=VALUE) under the time limit;
// once `ready()` holds (polled for at most 60 s) `act()` runs, once; `acted`:
// whether it did.
TrainRun train_and_act(const fs::path& dir, const std::vector<std::string>& sets, const std::function<bool()>& ready,
                       const std::function<bool()>& act, bool& acted) {
  std::vector<std::string> args = {"timeout", "-s", "KILL", std::to_string(kTimeLimitS), NTP_BINARY, "train",
                                   "--run-dir", dir.string(), "--verify"};
  std::vector<std::string> all = {"model.layers=1", "model.seq_len=32", "train.micro_batch=2", "run.trace_steps=0",
                                  "elastic.recover=true", "elastic.settle_s=0.2", "deadline.collective_s=10",
                                  "deadline.rendezvous_s=30", "deadline.heartbeat_s=1.5", "train.global_batch=8"};
  all.insert(all.end(), sets.begin(), sets.end());
  for (const std::string& set : all) args.insert(args.end(), {"--set", set});
  const fs::path out = dir.string() + ".out";
  const pid_t child = ntp::testing::spawn_logged(args, out);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!ready() && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  acted = ready() && act();
  int status = 0;
  ::waitpid(child, &status, 0);
  std::ifstream log(out);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
          std::string(std::istreambuf_iterator<char>(log), {})};
}

// train_and_act whose act sends `sig` by pid to the newest worker of `rank`.
TrainRun train_and_signal(const fs::path& dir, const std::vector<std::string>& sets, int rank, int sig,
                          const std::function<bool()>& ready, bool& sent) {
  return train_and_act(
      dir, sets, ready,
      [&] {
        pid_t worker = 0;
        for (const nlohmann::json& e : events_named(dir, "worker_started"))
          if (e["rank"] == rank) worker = e["pid"].get<pid_t>();  // the last one: a restarted worker if any
        return worker > 0 && ::kill(worker, sig) == 0;
      },
      sent);
}

// The data file rewritten while the run trains, before a lost rank's worker
// is started again: the restarted worker reads the file again and, with no
// record of the job's data, trained on other tokens than its replica partner,
// silently. Now it refuses to start, naming the file and the job's record; the
// others finish the run over the data they read, and ntp train's verdict
// names the cause.
TEST_F(RecoveryCliTest, ARankRestartedAfterTheDataFileChangedRefusesItAndTheVerdictSaysWhy) {
  const fs::path data = dir_.string() + ".data.txt";
  ntp::testing::write_text_data(data, "first");
  bool rewritten = false;
  const TrainRun run = train_and_act(
      dir_,
      {"train.steps=40", "parallel.dp=2", "parallel.tp=2", "test.failures=\"1@2:forward\"", "elastic.rejoin=true",
       "test.repair_at_step=8", "data.path=" + data.string()},
      [&] { return !events_named(dir_, "failure_detected").empty(); },
      [&] {
        ntp::testing::write_text_data(data, "other");
        return true;
      },
      rewritten);
  fs::remove(data);
  ASSERT_NE(run.code, 137) << stall_report(dir_);
  ASSERT_TRUE(rewritten) << "no failure detected within 60 s\n" << run.output;
  ASSERT_FALSE(events_named(dir_, "rank_restarted").empty()) << "rank 1 was not started again\n" << run.output;
  EXPECT_EQ(run.code, 1) << run.output;
  EXPECT_NE(run.output.find("rank 1 could not start: data.path: " + data.string() + " holds "), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("but this job started on "), std::string::npos) << run.output;
  EXPECT_TRUE(events_named(dir_, "rank_rejoined").empty()) << run.output;
  const std::vector<nlohmann::json> metrics = read_lines(dir_ / "metrics.jsonl");
  ASSERT_EQ(metrics.size(), 40u) << run.output;
  EXPECT_EQ(metrics.back()["tp"], nlohmann::json::parse("[1, 2]")) << run.output;
}

// The job's Redis store killed mid-run and not brought back: the workers
// train on meanwhile (no step waits on the store), and once the store's 20 s
// reconnect deadline passes the launcher stops: exit 1 naming the store, every
// worker killed and reaped before ntp train returns (before: the workers
// outlived it until the parent-death signal, with "comm peer error in
// store.get_many" as the only message).
TEST_F(RecoveryCliTest, AStoreLostForGoodStopsTheRunNamingItAndLeavesNoWorker) {
  if (!ntp::comm::testing::RedisServer::available()) GTEST_SKIP() << "redis-server is not installed";
  ntp::comm::testing::RedisServer redis;
  const std::vector<std::string> args = {
      "timeout", "-s", "KILL", std::to_string(kTimeLimitS), NTP_BINARY, "train", "--run-dir", dir_.string(),
      "--store", redis.spec(), "--set", "model.layers=1", "--set", "model.seq_len=32", "--set",
      "train.micro_batch=2", "--set", "run.trace_steps=0", "--set", "elastic.recover=true", "--set",
      "deadline.heartbeat_s=1.5", "--set", "train.global_batch=8", "--set", "train.steps=100000", "--set",
      "parallel.dp=2", "--set", "parallel.tp=2"};
  const fs::path out = dir_.string() + ".out";
  const pid_t child = ntp::testing::spawn_logged(args, out);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (read_lines(dir_ / "metrics.jsonl").size() < 2 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::size_t before = read_lines(dir_ / "metrics.jsonl").size();
  redis.stop();
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  std::ifstream log(out);
  const std::string text(std::istreambuf_iterator<char>(log), {});
  ASSERT_GE(before, 2u) << "no 2 steps within 60 s\n" << text;
  ASSERT_TRUE(WIFEXITED(status)) << stall_report(dir_) << text;
  EXPECT_EQ(WEXITSTATUS(status), 1) << text;
  EXPECT_NE(text.find("the launcher lost the job's store " + redis.spec() + " and stopped its workers"),
            std::string::npos)
      << text;
  EXPECT_GT(read_lines(dir_ / "metrics.jsonl").size(), before) << "the workers stopped training with the store";
  for (const nlohmann::json& e : events_named(dir_, "worker_started")) {
    const auto pid = e["pid"].get<pid_t>();
    EXPECT_FALSE(fs::exists("/proc/" + std::to_string(pid))) << "rank " << e["rank"] << " (pid " << pid
                                                             << ") outlived ntp train";
  }
}

// The restarted worker SIGKILLed by pid as soon as it asks to rejoin (its
// request stays in the store): the members, which may already be growing for
// it, go on without it at the reduced TP, and the run finishes and verifies
// (before: "a collective failed ... but no rank was lost", exit 1). Whether
// the kill lands before the worker got in is a race; either way the run ends
// at tp [1, 2] (a rank is restarted once).
TEST_F(RecoveryCliTest, ARankLostWhileItRejoinsLeavesTheJobAtReducedTp) {
  bool sent = false;
  const TrainRun run = train_and_signal(
      dir_, {"train.steps=40", "parallel.dp=2", "parallel.tp=2", "test.failures=\"1@2:forward\"",
             "elastic.rejoin=true", "test.repair_at_step=4"},
      1, SIGKILL, [&] { return !events_named(dir_, "rank_rejoining").empty(); }, sent);
  ASSERT_TRUE(sent) << "the restarted worker did not ask to rejoin within 60 s\n" << run.output;
  expect_recovered(run, 40);
  const std::vector<nlohmann::json> metrics = read_lines(dir_ / "metrics.jsonl");
  EXPECT_EQ(metrics.back()["tp"], nlohmann::json::parse("[1, 2]")) << run.output;
  std::printf("the restarted worker was killed %s it got in\n",
              events_named(dir_, "rank_rejoined").empty() ? "before" : "after");
}

// SIGSTOP to rank 3 once the final checkpoint is saved: the ranks are at the
// end (model.bin, their hash files, the last barrier). Rank 3 is fenced, the
// survivors recover with no step to redo, and --verify passes: a hash file
// rank 3 wrote before it stopped is from an older epoch and left out (before:
// "replica 1: heads unit 4 held by ranks 2, 3"). Whether rank 3 wrote its file
// before the stop is a race; either way the run must verify.
TEST_F(RecoveryCliTest, ARankStoppedAtTheEndIsRecoveredAndTheRunVerifies) {
  bool sent = false;
  const TrainRun run = train_and_signal(
      dir_, {"train.steps=6", "parallel.dp=2", "parallel.tp=2"}, 3, SIGSTOP,
      [&] {
        for (const nlohmann::json& e : events_named(dir_, "checkpoint_saved"))
          if (e["step"] == 6) return true;
        return false;
      },
      sent);
  ASSERT_TRUE(sent) << "no final checkpoint within 60 s\n" << run.output;
  ASSERT_NE(run.code, 137) << stall_report(dir_);
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_NE(run.output.find("verify: pass — "), std::string::npos) << run.output;
  EXPECT_EQ(read_lines(dir_ / "metrics.jsonl").size(), 6u);
}

// TP 4 -> 3 -> 4: a degraded replica changes K for the healthy one too, and back.
TEST_F(RecoveryCliTest, ARejoinRestoresTp4AfterTp3) {
  const TrainRun run = train(dir_, "--set train.steps=30 --set parallel.dp=2 --set parallel.tp=4"
                                   " --set 'test.failures=\"2@2:sync:STOP\"' --set elastic.rejoin=true"
                                   " --set test.repair_at_step=4");
  expect_recovered(run, 30);
  const std::vector<nlohmann::json> metrics = read_lines(dir_ / "metrics.jsonl");
  EXPECT_EQ(metrics[4]["tp"], nlohmann::json::parse("[3, 4]"));
  EXPECT_EQ(metrics.back()["tp"], nlohmann::json::parse("[4, 4]")) << run.output;
}

// A diverged run (lr 1e30): the loss of step 1 is not finite. "stop" ends the
// run naming the step, with summary.json saying why; "skip" drops that step's
// update on every rank alike and logs the row as skipped.
TEST_F(RecoveryCliTest, ANonFiniteLossStopsNamingTheStepOrIsSkippedEverywhere) {
  const std::string diverge = "--set train.steps=3 --set parallel.dp=2 --set parallel.tp=2 --set train.lr=1e30"
                              " --set train.grad_clip=0 ";
  const TrainRun stop = train(dir_, diverge);
  ASSERT_NE(stop.code, 137) << stall_report(dir_);
  EXPECT_EQ(stop.code, 1) << stop.output;
  EXPECT_NE(stop.output.find("step 1: non-finite loss"), std::string::npos) << stop.output;
  std::ifstream summary(dir_ / "summary.json");
  ASSERT_TRUE(summary);
  const nlohmann::json s = nlohmann::json::parse(summary);
  EXPECT_EQ(s["status"], "failed");
  EXPECT_NE(s["reason"].get<std::string>().find("step 1"), std::string::npos);

  const fs::path skip_dir = dir_.string() + "_skip";
  fs::remove_all(skip_dir);
  const TrainRun skip = train(skip_dir, diverge + "--set train.on_nan=skip");
  ASSERT_EQ(skip.code, 0) << skip.output;
  const std::vector<nlohmann::json> rows = read_lines(skip_dir / "metrics.jsonl");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_FALSE(rows[0].value("skipped", false));
  EXPECT_TRUE(rows[1].value("skipped", false)) << rows[1].dump();
  EXPECT_TRUE(rows[1]["loss"].is_null()) << rows[1].dump();
  fs::remove_all(skip_dir);
}

TEST_F(RecoveryCliTest, ContradictoryDeadlinesAreRejectedBeforeAnyWorkerStarts) {
  const TrainRun run = train(dir_, "--set parallel.dp=2 --set parallel.tp=2 --set deadline.collective_s=40");
  EXPECT_EQ(run.code, 2) << run.output;
  EXPECT_NE(run.output.find("deadline.rendezvous_s"), std::string::npos) << run.output;
}

// Five random failures (kills, stops, hangs at random phases of random
// steps) over dp 3 x pp 3 x tp 2: 18 ranks, 9 stages. Seeds 1-8 each
// recovered and verified when this test was written; seed 5 loses ranks of
// two stages of two replicas.
TEST_F(RecoveryCliTest, ChaosOverPipelineStagesRecoversOrStopsCleanly) {
  expect_recovered_or_stopped(train(dir_, "--set train.steps=8 --set model.layers=3 --set parallel.dp=3"
                                         " --set parallel.pp=3 --set parallel.tp=2 --set test.chaos=5"
                                         " --set test.chaos_seed=5"),
                              8);
}

// Pipeline stages, signalled from the outside by pid in the middle of a
// step (kPp2's ranks): SIGKILL to a last-stage worker and SIGSTOP to a
// first-stage one; each run recovers in-job and verifies.
TEST_F(RecoveryCliTest, AStageWorkerSignalledByPidIsRecoveredInJob) {
  for (const auto& [rank, sig] : std::vector<std::pair<int, int>>{{6, SIGKILL}, {1, SIGSTOP}}) {
    SCOPED_TRACE("rank " + std::to_string(rank) + " signal " + std::to_string(sig));
    fs::remove_all(dir_);
    bool sent = false;
    const TrainRun run = train_and_signal(
        dir_, {"train.steps=10", "model.layers=2", "parallel.dp=2", "parallel.pp=2", "parallel.tp=2"}, rank, sig,
        [&] { return read_lines(dir_ / "metrics.jsonl").size() >= 3; }, sent);
    ASSERT_TRUE(sent) << "no third step within 60 s\n" << run.output;
    expect_recovered(run, 10);
    EXPECT_EQ(events_named(dir_, "membership_agreed").at(0)["lost"], nlohmann::json::parse("[" + std::to_string(rank) + "]"));
  }
}

// Signals sent by pid from outside while the validation pass runs: with a
// pass after every step that takes most of each step's wall time (256
// micro-batches against one training step), a signal 0.6 s after a step's
// row is logged lands in the next step's pass. The step's update stands (the
// job resumes at the step after it), the survivors run the cut pass again,
// and every row has its validation loss. A non-writer killed without stages,
// and a first-stage worker stopped with two stages.
TEST_F(RecoveryCliTest, ARankSignalledByPidDuringTheValidationPassIsRecovered) {
  fs::create_directories(dir_);
  const fs::path val = dir_.string() + "_val.txt";
  ntp::testing::write_text_data(val, "validation");
  const std::vector<std::string> eval = {"train.steps=6", "train.eval_every=1", "train.eval_batches=256",
                                         "data.val_path=\"" + val.string() + "\""};
  const std::vector<std::string> flat = {"parallel.dp=2", "parallel.tp=2"};
  const std::vector<std::string> staged = {"model.layers=2", "parallel.dp=2", "parallel.pp=2", "parallel.tp=2"};
  struct Case {
    const std::vector<std::string>& layout;
    int rank;
    int sig;
  };
  for (const Case& c : {Case{flat, 3, SIGKILL}, Case{staged, 1, SIGSTOP}}) {
    SCOPED_TRACE("rank " + std::to_string(c.rank) + " signal " + std::to_string(c.sig));
    fs::remove_all(dir_);
    std::vector<std::string> sets = eval;
    sets.insert(sets.end(), c.layout.begin(), c.layout.end());
    bool sent = false;
    std::size_t logged = 0;  // rows out when the second one was first seen
    std::chrono::steady_clock::time_point seen;
    const TrainRun run = train_and_signal(
        dir_, sets, c.rank, c.sig,
        [&] {
          if (logged < 2) {
            logged = read_lines(dir_ / "metrics.jsonl").size();
            seen = std::chrono::steady_clock::now();
            return false;
          }
          return std::chrono::steady_clock::now() - seen >= std::chrono::milliseconds(600);
        },
        sent);
    ASSERT_TRUE(sent) << "no second step within 60 s\n" << run.output;
    expect_recovered(run, 6);
    const std::vector<nlohmann::json> resumed = events_named(dir_, "step_resumed");
    ASSERT_FALSE(resumed.empty());
    // Rows 0 .. logged - 1 were out; step `logged` trained, and its pass was cut.
    EXPECT_EQ(resumed.front()["step"], logged + 1) << "the signal missed the pass: " << resumed.front().dump();
    EXPECT_GT(resumed.front().value("validation_s", 0.0), 0.0) << resumed.front().dump();
    for (const nlohmann::json& row : read_lines(dir_ / "metrics.jsonl")) {
      EXPECT_TRUE(row.contains("val_loss")) << row.dump();
    }
    if (HasFailure()) break;
  }
  fs::remove(val);
}

// A repaired rank of stage 1 rejoins: its stage goes back to TP 2, the
// replica's units of that stage come back to it from its own stage's peers.
TEST_F(RecoveryCliTest, ARepairedStageRankRejoinsAndItsStageGoesBackToFullTp) {
  const TrainRun run = train(dir_, "--set train.steps=30 " + kPp2 +
                                       "--set 'test.failures=\"6@1:forward\"' --set elastic.rejoin=true"
                                       " --set test.repair_at_step=2");
  expect_recovered(run, 30);
  const std::vector<nlohmann::json> metrics = read_lines(dir_ / "metrics.jsonl");
  EXPECT_EQ(metrics[2]["tp"], nlohmann::json::parse("[2, 1]"));
  EXPECT_EQ(metrics.back()["tp"], nlohmann::json::parse("[2, 2]")) << run.output;
  ASSERT_EQ(events_named(dir_, "rank_rejoined").size(), 1u) << run.output;
  EXPECT_EQ(events_named(dir_, "rank_rejoined")[0]["rank"], 6);
}

// A stage-1 writer killed while its checkpoint part is written: that save is
// abandoned, the job recovers in-job and saves the same step again in the new
// layout; the later one is complete too.
TEST_F(RecoveryCliTest, AStageWriterKilledWhileSavingIsRecoveredAndTheStepSavedAgain) {
  const TrainRun run = train(dir_, "--set train.steps=12 --set train.checkpoint_every=4 " + kPp2 +
                                       "--set 'test.failures=\"2@7:checkpoint\"'");
  expect_recovered(run, 12);
  std::vector<std::int64_t> saved;
  for (const nlohmann::json& e : events_named(dir_, "checkpoint_saved")) saved.push_back(e["step"]);
  EXPECT_EQ(saved, (std::vector<std::int64_t>{4, 8, 12}));
  ASSERT_FALSE(events_named(dir_, "checkpoint_failed").empty()) << run.output;
  EXPECT_EQ(events_named(dir_, "checkpoint_failed")[0]["step"], 8);
  for (const char* step : {"step-8", "step-12"}) {
    EXPECT_TRUE(fs::exists(dir_ / "checkpoints" / step / "manifest.json")) << step;
  }
}

}  // namespace
