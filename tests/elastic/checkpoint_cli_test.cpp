// Checkpoints as a user meets them: a run stopped at step 12 resumes from its
// step-10 checkpoint at another layout and ends where the uninterrupted run
// ends (every step's loss, --verify); a worker killed in the middle of a save
// leaves the previous checkpoint usable; Ctrl-C, also in the middle of an
// in-job recovery, leaves a checkpoint that resumes; a failure in-job recovery cannot handle restarts from the newest
// checkpoint; broken input is refused naming what is wrong. Every run has a
// hard time limit.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "run_files.h"

namespace {

namespace fs = std::filesystem;

constexpr int kTimeLimitS = 150;
const std::string kModel =
    " --set model.layers=1 --set model.seq_len=32 --set train.micro_batch=2 --set run.trace_steps=0"
    " --set train.global_batch=8 --set train.steps=20 --set train.lr=1e-3 --set train.checkpoint_every=5"
    " --set deadline.collective_s=10 --set deadline.rendezvous_s=30 --set deadline.heartbeat_s=1.5";

// A dp 2 x tp 2 job of short sequences (the model and steps are the test's).
const std::string kDp2Tp2 =
    " --set model.seq_len=32 --set parallel.dp=2 --set parallel.tp=2 --set train.global_batch=8";

struct CliResult {
  int code = -1;  // 137: killed at the time limit
  std::string output;
};

CliResult ntp(const std::string& args) {
  const ntp::testing::CliRun r =
      ntp::testing::run_cli("timeout -s KILL " + std::to_string(kTimeLimitS) + " " + std::string(NTP_BINARY), args);
  return {r.exit_code, r.out + r.err};
}

// `ntp train --run-dir RUN --verify SETS` in the background under the time
// limit, its output to `out`; SETS is split at spaces (no quoting).
pid_t spawn_train_verify(const fs::path& run, const std::string& sets, const fs::path& out) {
  std::vector<std::string> args = {"timeout", "-s", "KILL", std::to_string(kTimeLimitS), NTP_BINARY, "train",
                                   "--run-dir", run.string(), "--verify"};
  std::istringstream words(sets);
  for (std::string word; words >> word;) args.push_back(word);
  fs::create_directories(out.parent_path());
  return ntp::testing::spawn_logged(args, out);
}

// Polls events.jsonl until `name` is there or `seconds` have passed.
void wait_for_event(const fs::path& run, const std::string& name, int seconds) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (ntp::testing::events_named(run, name).empty() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::vector<double> losses(const fs::path& run) {
  std::vector<double> out;
  for (const nlohmann::json& row : ntp::testing::read_jsonl_lines(run / "metrics.jsonl")) {
    EXPECT_EQ(row["step"].get<std::size_t>(), out.size()) << run;
    out.push_back(row["loss"].get<double>());
  }
  return out;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

class CheckpointCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ntp_ckpt_cli_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // The reference: dp 2 x tp 4, 20 steps, no interruption.
  std::vector<double> uninterrupted() {
    const CliResult r = ntp("train --run-dir " + (dir_ / "reference").string() + kModel +
                      " --set parallel.dp=2 --set parallel.tp=4");
    EXPECT_EQ(r.code, 0) << r.output;
    return losses(dir_ / "reference");
  }

  // The same job stopped by a worker killed at the start of step 12 (no
  // in-job recovery): checkpoints step-5 and step-10 remain.
  fs::path stopped_at_12(const std::string& name) {
    const fs::path run = dir_ / name;
    const CliResult r = ntp("train --run-dir " + run.string() + kModel +
                      " --set parallel.dp=2 --set parallel.tp=4 --set 'test.failures=\"5@12:start\"'");
    EXPECT_NE(r.code, 137) << "the stopped run hung:\n" << r.output;
    EXPECT_EQ(r.code, 1) << r.output;
    return run;
  }

  fs::path dir_;
};

// Every loss of the resumed run is the uninterrupted run's: the first ten
// bit for bit (the same run), the rest within reassociation noise when the
// layout changed, bit for bit when it did not.
void expect_same_training(const std::vector<double>& want, const std::vector<double>& got, bool same_layout) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t s = 0; s < want.size(); ++s) {
    if (s < 10 || same_layout) {
      EXPECT_EQ(got[s], want[s]) << "step " << s;
    } else {
      EXPECT_NEAR(got[s], want[s], 1e-5 * std::abs(want[s])) << "step " << s;
    }
  }
}

TEST_F(CheckpointCliTest, ResumedAtAnyLayoutTheRunEndsWhereTheUninterruptedOneDoes) {
  const std::vector<double> reference = uninterrupted();
  const struct {
    const char* name;
    const char* layout;
  } cases[] = {
      {"same_layout", ""},
      {"tp3_failed_slot", " --set 'parallel.failed={0=[1]}'"},
      {"dp3", " --set parallel.dp=3"},
      {"tp1", " --set parallel.tp=1"},
      {"one_process", " --set parallel.tp=1 --set parallel.dp=1"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const fs::path run = stopped_at_12(c.name);
    ASSERT_TRUE(fs::exists(run / "checkpoints" / "step-10" / "manifest.json"));
    const CliResult resumed = ntp("train --resume " + run.string() + c.layout + " --verify");
    ASSERT_NE(resumed.code, 137) << "the resumed run hung:\n" << resumed.output;
    ASSERT_EQ(resumed.code, 0) << resumed.output;
    EXPECT_NE(resumed.output.find("verify: pass — "), std::string::npos) << resumed.output;
    expect_same_training(reference, losses(run), std::string(c.layout).empty());
    EXPECT_EQ(ntp::testing::events_named(run, "run_resumed").size(), 1u);
  }
}

TEST_F(CheckpointCliTest, AWorkerKilledWhileSavingLeavesThePreviousCheckpoint) {
  // Rank 0 writes and assembles; it dies in the save after step 9 (step-10),
  // before its part: no manifest. step-5 is complete (it waited for it).
  const fs::path run = dir_ / "killed_in_save";
  const CliResult r = ntp("train --run-dir " + run.string() + kModel +
                    " --set parallel.dp=2 --set parallel.tp=2 --set 'test.failures=\"0@9:checkpoint\"'");
  ASSERT_NE(r.code, 137) << r.output;
  ASSERT_EQ(r.code, 1) << r.output;
  EXPECT_FALSE(fs::exists(run / "checkpoints" / "step-10"));
  EXPECT_TRUE(fs::exists(run / "checkpoints" / "step-5" / "manifest.json"));
  const CliResult partial = ntp("train --resume " + (run / "checkpoints" / "step-10.partial-e0").string());
  EXPECT_EQ(partial.code, 2) << partial.output;
  EXPECT_NE(partial.output.find("did not finish"), std::string::npos) << partial.output;
  const CliResult resumed = ntp("train --resume " + run.string() + " --verify");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("verify: pass — "), std::string::npos) << resumed.output;
  EXPECT_EQ(ntp::testing::events_named(run, "run_resumed").at(0)["step"], 5);
  EXPECT_EQ(losses(run).size(), 20u);
}

// The manifest of a complete checkpoint folder.
nlohmann::json manifest_of(const fs::path& checkpoint) {
  std::ifstream in(checkpoint / "manifest.json");
  return nlohmann::json::parse(in);
}

// The test model at dp 2 x tp 2 with in-job recovery, `failures` injected, verified.
CliResult recovering_run(const fs::path& run, const std::string& failures) {
  return ntp("train --run-dir " + run.string() + kModel +
             " --set parallel.dp=2 --set parallel.tp=2 --set elastic.recover=true --set elastic.settle_s=0.2"
             " --set 'test.failures=\"" + failures + "\"' --verify");
}

TEST_F(CheckpointCliTest, AWriterStoppedBeforeItsPartDoesNotHoldUpTraining) {
  // Rank 1 (a writer) is SIGSTOPped before its part of step-5: it is fenced,
  // the job recovers in-job, the writer rank gives up that save at once (not
  // after deadline.checkpoint_s), the survivors save step-5 again in the new
  // layout (the recovery resumes at that boundary) and the later checkpoints
  // are complete.
  const fs::path run = dir_ / "stopped_writer";
  const CliResult r = recovering_run(run, "1@4:checkpoint:STOP");
  ASSERT_NE(r.code, 137) << "stalled:\n" << r.output;
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("verify: pass — "), std::string::npos) << r.output;
  for (const char* step : {"step-15", "step-20"}) {
    EXPECT_TRUE(fs::exists(run / "checkpoints" / step / "manifest.json")) << step;
  }
  // Every boundary was saved, step 5 after the recovery (the older ones are
  // pruned by train.keep_checkpoints).
  std::vector<std::int64_t> saved;
  for (const nlohmann::json& e : ntp::testing::events_named(run, "checkpoint_saved")) saved.push_back(e["step"]);
  EXPECT_EQ(saved, (std::vector<std::int64_t>{5, 10, 15, 20}));
  const double agreed = ntp::testing::events_named(run, "membership_agreed").at(0)["time"];
  EXPECT_GT(ntp::testing::events_named(run, "checkpoint_saved").at(0)["time"].get<double>(), agreed);
  const std::vector<nlohmann::json> failed = ntp::testing::events_named(run, "checkpoint_failed");
  ASSERT_FALSE(failed.empty());
  EXPECT_NE(failed[0]["reason"].get<std::string>().find("abandoned"), std::string::npos) << failed[0];
}

TEST_F(CheckpointCliTest, AWriterLostInTheFinalSaveStillLeavesTheFinalCheckpoint) {
  // Rank 0 writes and assembles; it dies before its part of the last save
  // (step-20). The survivors recover at the end of the run, with no step to
  // redo, and save step-20 again: it holds exactly the final parameters
  // (its llm.c export is model.bin, byte for byte).
  const fs::path run = dir_ / "lost_in_final_save";
  const CliResult r = recovering_run(run, "0@19:checkpoint");
  ASSERT_NE(r.code, 137) << "stalled:\n" << r.output;
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("verify: pass — "), std::string::npos) << r.output;
  ASSERT_TRUE(fs::exists(run / "checkpoints" / "step-20" / "manifest.json")) << r.output;
  const nlohmann::json final_step = manifest_of(run / "checkpoints" / "step-20");
  EXPECT_EQ(final_step["saved_by"]["epoch"], 1) << final_step["saved_by"];
  EXPECT_EQ(final_step["optimizer_steps"], 20);
  const fs::path exported = dir_ / "final_export.bin";
  const CliResult e = ntp("export " + (run / "checkpoints" / "step-20").string() + " --llmc " + exported.string());
  ASSERT_EQ(e.code, 0) << e.output;
  EXPECT_EQ(read_file(exported), read_file(run / "model.bin"));
}

// Starts a 200-step dp 2 x tp 2 run under `timeout`, sends it `signal` (SIGINT
// as a terminal's Ctrl-C; `timeout` forwards it) once `ready` holds, and checks
// that it stops with exit 130 and a checkpoint of the last step done, which
// resumes and verifies.
void interrupt_and_resume(const fs::path& dir, const fs::path& run, const std::vector<std::string>& extra,
                          const std::function<bool()>& ready, int signal = SIGINT) {
  std::vector<std::string> args = {"timeout", "-s", "KILL", std::to_string(kTimeLimitS), NTP_BINARY, "train",
                                   "--run-dir", run.string()};
  for (const char* set : {"model.layers=1", "model.seq_len=32", "train.micro_batch=2", "train.steps=200",
                          "train.global_batch=8", "parallel.dp=2", "parallel.tp=2", "run.trace_steps=0"}) {
    args.push_back("--set");
    args.push_back(set);
  }
  args.insert(args.end(), extra.begin(), extra.end());
  const fs::path out = dir / (run.filename().string() + ".out");
  const pid_t child = ntp::testing::spawn_logged(args, out);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!ready()) {
    if (std::chrono::steady_clock::now() > give_up) {
      ::kill(child, SIGKILL);
      ::waitpid(child, nullptr, 0);
      FAIL() << "the moment to interrupt did not come within 60 s\n" << read_file(out);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(child, signal);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  const std::string output = read_file(out);
  ASSERT_TRUE(WIFEXITED(status)) << output;
  ASSERT_EQ(WEXITSTATUS(status), 130) << output;
  EXPECT_NE(output.find("--resume"), std::string::npos) << output;
  const std::size_t done = losses(run).size();
  ASSERT_GE(done, 1u);
  ASSERT_LT(done, 200u);
  EXPECT_TRUE(fs::exists(run / "checkpoints" / ("step-" + std::to_string(done)) / "manifest.json"));
  const nlohmann::json summary = nlohmann::json::parse(read_file(run / "summary.json"));
  EXPECT_EQ(summary["status"], "interrupted");
  // What a writer killed while it wrote model.bin leaves: the run's end removes it.
  std::ofstream(run / "model.bin.tmp.4242") << "partial";
  const CliResult resumed = ntp("train --resume " + run.string() + " --set train.steps=200 --verify");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_FALSE(fs::exists(run / "model.bin.tmp.4242"));
  EXPECT_NE(resumed.output.find("verify: pass — "), std::string::npos) << resumed.output;
  EXPECT_EQ(losses(run).size(), 200u);
}

TEST_F(CheckpointCliTest, CtrlCSavesACheckpointThatResumes) {
  const fs::path run = dir_ / "interrupted";
  interrupt_and_resume(dir_, run, {}, [&] { return ntp::testing::read_jsonl_lines(run / "metrics.jsonl").size() >= 3; });
}

// A hang-up (the terminal or ssh session closed) stops the run as Ctrl-C
// does, with a checkpoint of the step in flight (before: the workers died of
// the forwarded SIGHUP and the steps since the last checkpoint were lost).
TEST_F(CheckpointCliTest, AHangUpSavesACheckpointThatResumes) {
  const fs::path run = dir_ / "hung_up";
  interrupt_and_resume(
      dir_, run, {}, [&] { return ntp::testing::read_jsonl_lines(run / "metrics.jsonl").size() >= 3; }, SIGHUP);
}

// A --resume while the run still trains is refused, naming the live run's
// process, and changes nothing: the live run goes on, stops at Ctrl-C with
// its checkpoint, and only then resumes and verifies (each step once).
TEST_F(CheckpointCliTest, AResumeWhileTheRunTrainsIsRefusedAndChangesNothing) {
  const fs::path run = dir_ / "live";
  interrupt_and_resume(dir_, run, {"--set", "train.checkpoint_every=5"}, [&] {
    if (!fs::exists(run / "checkpoints" / "step-5" / "manifest.json")) return false;
    const CliResult second = ntp("train --resume " + run.string());
    EXPECT_EQ(second.code, 1) << second.output;
    EXPECT_NE(second.output.find(run.string() + ": another ntp train (pid "), std::string::npos) << second.output;
    EXPECT_EQ(ntp::testing::events_named(run, "run_resumed").size(), 0u);
    return true;
  });
}

// The data file changed between a run and its --resume (regenerated in
// place): a checkpoint's place in the sample order is a step over the tokens
// it trained on, and going on over other tokens mixed two datasets, silently.
// The resume is refused, naming the file and both identities, and changes
// nothing; with the data put back it resumes and verifies.
TEST_F(CheckpointCliTest, AResumeOverADataFileChangedSinceIsRefusedAndChangesNothing) {
  const fs::path run = dir_ / "run";
  const fs::path data = dir_ / "data.txt";
  ntp::testing::write_text_data(data, "first");
  const CliResult first = ntp("train --run-dir " + run.string() + kModel + " --set data.path=" + data.string() +
                              " --set parallel.dp=2 --set 'test.failures=\"1@7:start\"'");
  ASSERT_EQ(first.code, 1) << first.output;
  const std::string events = read_file(run / "events.jsonl");

  ntp::testing::write_text_data(data, "other");
  const CliResult refused = ntp("train --resume " + run.string());
  EXPECT_EQ(refused.code, 2) << refused.output;
  EXPECT_NE(refused.output.find((run / "checkpoints" / "step-5").string() + ": saved over " + data.string() + " ("),
            std::string::npos)
      << refused.output;
  EXPECT_NE(refused.output.find("but data.path now holds "), std::string::npos) << refused.output;
  EXPECT_EQ(read_file(run / "events.jsonl"), events);
  EXPECT_EQ(losses(run).size(), 7u);

  ntp::testing::write_text_data(data, "first");
  const CliResult resumed = ntp("train --resume " + run.string() + " --verify");
  EXPECT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_EQ(losses(run).size(), 20u);
}

// One writer's part of a checkpoint cannot be written (here a folder stands
// where its file goes; on a cluster, a full or failing disk): that save fails,
// training goes on, and the next save completes. Before, the assembler waited
// for the part until deadline.checkpoint_s, so its next save stalled its
// training that long, and the others, past the collective deadline, took the
// healthy assembler for a failed rank and fenced it.
TEST_F(CheckpointCliTest, AWriterWhosePartFailsDoesNotStallTheAssemblerIntoBeingFenced) {
  const fs::path run = dir_ / "run";
  const fs::path out = dir_ / "run.out";
  const pid_t child = spawn_train_verify(
      run, kDp2Tp2 + " --set model.layers=1 --set train.micro_batch=2 --set run.trace_steps=0 --set train.steps=60"
                     " --set train.checkpoint_every=20 --set elastic.recover=true --set deadline.collective_s=10"
                     " --set deadline.heartbeat_s=1.5",
      out);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!fs::exists(run / "config.toml") && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  fs::create_directories(run / "checkpoints" / "step-20.partial-e0" / "rank-1.bin" / "in-the-way");
  const std::size_t rows_then = ntp::testing::read_jsonl_lines(run / "metrics.jsonl").size();
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  const std::string output = read_file(out);
  ASSERT_LT(rows_then, 20u) << "the obstacle came after the save of step 20";
  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_EQ(WEXITSTATUS(status), 0) << output;
  EXPECT_TRUE(ntp::testing::events_named(run, "failure_detected").empty()) << output;
  EXPECT_TRUE(ntp::testing::events_named(run, "rank_fenced").empty()) << output;
  std::vector<std::string> failed;
  for (const nlohmann::json& e : ntp::testing::events_named(run, "checkpoint_failed")) {
    EXPECT_EQ(e["step"], 20) << e.dump();
    failed.push_back(e["rank"].dump() + ": " + e["reason"].get<std::string>());
  }
  ASSERT_EQ(failed.size(), 2u) << output;
  EXPECT_NE(std::find_if(failed.begin(), failed.end(),
                         [](const std::string& f) { return f.find("0: ") == 0 && f.find("abandoned") != std::string::npos; }),
            failed.end())
      << output;
  EXPECT_TRUE(fs::exists(run / "checkpoints" / "step-40" / "manifest.json")) << output;
  EXPECT_TRUE(fs::exists(run / "checkpoints" / "step-60" / "manifest.json")) << output;
}

// The run directory removed under a live job (a mistaken rm -rf): the job
// stops within seconds, names the cause rather than a store error that
// follows from it, and leaves no process behind.
TEST_F(CheckpointCliTest, ARunDirectoryRemovedWhileTheJobTrainsStopsItAndSaysWhy) {
  const fs::path run = dir_ / "removed";
  const fs::path out = dir_ / "removed.out";
  const pid_t child = spawn_train_verify(
      run, kDp2Tp2 + " --set model.layers=1 --set train.micro_batch=2 --set train.steps=2000 --set run.trace_steps=0",
      out);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (ntp::testing::read_jsonl_lines(run / "metrics.jsonl").size() < 3 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::error_code error;
  do fs::remove_all(run, error);  // workers may still create files meanwhile
  while (fs::exists(run));
  const auto removed = std::chrono::steady_clock::now();
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - removed).count();
  const std::string output = read_file(out);
  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_EQ(WEXITSTATUS(status), 1) << output;
  EXPECT_LT(seconds, 45.0) << "the job went on " << seconds << " s without its run directory\n" << output;
  EXPECT_NE(output.find("the run directory " + run.string() + " was removed while the job ran"), std::string::npos)
      << output;
  EXPECT_EQ(ntp::testing::processes_naming(run.string()), std::vector<pid_t>{}) << "processes outlived the job";
}

// A resume refused for its layout leaves the run's history as it was (it
// used to give the "claim" back by deleting the run's events.jsonl).
TEST_F(CheckpointCliTest, AResumeRefusedForItsLayoutKeepsTheRunsFiles) {
  const fs::path run = stopped_at_12("refused");
  const std::string events = read_file(run / "events.jsonl");
  ASSERT_FALSE(events.empty());
  const CliResult r = ntp("train --resume " + run.string() + " --set parallel.tp=13");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("parallel.tp: cannot lay out"), std::string::npos) << r.output;
  EXPECT_EQ(read_file(run / "events.jsonl"), events);
  const CliResult resumed = ntp("train --resume " + run.string() + " --verify");
  EXPECT_EQ(resumed.code, 0) << resumed.output;
}

// Ctrl-C while the survivors recover from a death: the recovery completes,
// the step redone is saved at the reduced TP, and the run resumes from it.
TEST_F(CheckpointCliTest, CtrlCDuringAnInJobRecoverySavesACheckpointThatResumes) {
  const fs::path run = dir_ / "interrupted_in_recovery";
  interrupt_and_resume(dir_, run,
                       {"--set", "elastic.recover=true", "--set", "elastic.settle_s=0.2", "--set",
                        "test.failures=\"1@3:backward\""},
                       [&] { return !ntp::testing::events_named(run, "failure_detected").empty(); });
}

// Ctrl-C, then `signal` by pid to writer `rank` of the interrupt's save as
// soon as the save begins (elastic.recover: the launcher fences ranks whose
// heartbeat stops). The run ends with 130 within 30 s and names no
// checkpoint that is not there. Whether the rank wrote its part first is a
// race: either way the message must match what is on disk.
void ctrl_c_then_signal_a_writer(const fs::path& dir, const fs::path& run, int rank, int signal) {
  std::vector<std::string> args = {"timeout", "-s", "KILL", std::to_string(kTimeLimitS), NTP_BINARY, "train",
                                   "--run-dir", run.string()};
  for (const char* set : {"model.preset=small", "model.seq_len=32", "train.micro_batch=4", "train.steps=200",
                          "train.global_batch=8", "parallel.dp=2", "parallel.tp=2", "run.trace_steps=0",
                          "deadline.heartbeat_s=1.5", "elastic.recover=true"}) {
    args.push_back("--set");
    args.push_back(set);
  }
  const fs::path out = dir / (run.filename().string() + ".out");
  const pid_t child = ntp::testing::spawn_logged(args, out);
  const auto wait_for = [&](const char* what, const std::function<bool()>& ready) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!ready()) {
      if (std::chrono::steady_clock::now() > give_up) {
        ::kill(child, SIGKILL);
        ::waitpid(child, nullptr, 0);
        return ::testing::AssertionFailure() << what << " did not come within 60 s\n" << read_file(out);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return ::testing::AssertionSuccess();
  };
  ASSERT_TRUE(wait_for("two steps", [&] { return ntp::testing::read_jsonl_lines(run / "metrics.jsonl").size() >= 2; }));
  pid_t writer = 0;
  for (const nlohmann::json& e : ntp::testing::events_named(run, "worker_started"))
    if (e["rank"] == rank) writer = e["pid"].get<pid_t>();
  ASSERT_GT(writer, 0);
  const auto signalled = std::chrono::steady_clock::now();
  ::kill(child, SIGINT);
  fs::path partial;
  ASSERT_TRUE(wait_for("the interrupt's save", [&] {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(run / "checkpoints", ec))
      if (entry.path().filename().string().find(".partial") != std::string::npos) partial = entry.path();
    return !partial.empty();
  }));
  ::kill(writer, signal);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
  const std::string output = read_file(out);
  ASSERT_TRUE(WIFEXITED(status)) << output;
  ASSERT_EQ(WEXITSTATUS(status), 130) << output;
  EXPECT_LT(seconds, 30.0) << output;
  const nlohmann::json summary = nlohmann::json::parse(read_file(run / "summary.json"));
  EXPECT_EQ(summary["status"], "interrupted");
  if (summary["checkpoint"].is_string()) {
    const fs::path named = summary["checkpoint"].get<std::string>();
    EXPECT_TRUE(fs::exists(named / "manifest.json")) << output;
    EXPECT_NE(output.find(named.string()), std::string::npos) << output;
  } else {
    EXPECT_NE(output.find("did not complete"), std::string::npos) << output;
    EXPECT_EQ(output.find("--resume"), std::string::npos) << output;
  }
  std::printf("the interrupt's save %s; %.1f s from SIGINT to the end\n",
              summary["checkpoint"].is_string() ? "completed (the part was written before the kill)" : "was given up",
              seconds);
}

// A writer SIGKILLed: the other writer sees its heartbeat go stale and gives
// the save up (before: it waited for the part until the launcher's 60 s
// grace ran out, and exit 1).
TEST_F(CheckpointCliTest, AWriterKilledInTheCtrlCSaveEndsTheRunSoonAndHonestly) {
  ctrl_c_then_signal_a_writer(dir_, dir_ / "ctrl_c_writer_killed", 1, SIGKILL);
}

// The assembling writer, which also says the run was interrupted, SIGSTOPped:
// it is fenced, and the launcher says the interruption itself (before: exit 1,
// "the workers failed").
TEST_F(CheckpointCliTest, TheAssemblerStoppedInTheCtrlCSaveStillEndsAsAnInterruption) {
  ctrl_c_then_signal_a_writer(dir_, dir_ / "ctrl_c_assembler_stopped", 0, SIGSTOP);
}

TEST_F(CheckpointCliTest, EveryHolderOfAUnitLostRestartsFromTheCheckpoint) {
  // Slot 0 of both replicas dies at step 12: no survivor holds their units.
  // step-5 is complete by then (every rank waited for it before saving
  // step-10); step-10 may still be in flight when its writer dies.
  const std::string job = kModel +
                          " --set parallel.dp=2 --set parallel.tp=2 --set elastic.recover=true"
                          " --set elastic.settle_s=0.2 --set 'test.failures=\"0@12:start; 2@12:start\"'";
  const fs::path run = dir_ / "fallback";
  const CliResult r = ntp("train --run-dir " + run.string() + job + " --verify");
  ASSERT_NE(r.code, 137) << r.output;
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("verify: pass — "), std::string::npos) << r.output;
  const std::vector<nlohmann::json> restarts = ntp::testing::events_named(run, "fallback_restart");
  ASSERT_EQ(restarts.size(), 1u) << r.output;
  EXPECT_EQ(restarts[0]["tp"], nlohmann::json::array({1, 1}));
  const std::int64_t resumed = ntp::testing::events_named(run, "run_resumed").at(0)["step"];
  EXPECT_TRUE(resumed == 5 || resumed == 10) << resumed;
  EXPECT_EQ(losses(run).size(), 20u);

  const CliResult stop = ntp("train --run-dir " + (dir_ / "fallback_stop").string() + job +
                       " --set elastic.fallback=stop");
  EXPECT_EQ(stop.code, 3) << stop.output;
  EXPECT_NE(stop.output.find("in-job recovery is impossible"), std::string::npos) << stop.output;
  // Said once, then the lost units (the reason once read "impossible: in-job recovery impossible: ...").
  EXPECT_NE(stop.output.find("in-job recovery is impossible: no surviving holder"), std::string::npos) << stop.output;
}

// Every worker SIGSTOPped at once (a host-wide stall) once step-5 is saved:
// the launcher fences them all, nobody is left to recover in the job, and
// since nothing singles out a slot the workers restart from the checkpoint at
// the same layout and the run verifies (before: exit 1, "the workers failed").
TEST_F(CheckpointCliTest, EveryRankStalledAtOnceRestartsFromTheCheckpointAtTheSameLayout) {
  const fs::path run = dir_ / "all_stopped";
  const fs::path out = dir_ / "all_stopped.out";
  const pid_t child = spawn_train_verify(run, kModel + " --set parallel.dp=2 --set parallel.tp=2"
                                                  " --set elastic.recover=true --set elastic.settle_s=0.2"
                                                  " --set train.steps=40",
                                         out);
  wait_for_event(run, "checkpoint_saved", 60);
  std::vector<pid_t> workers;
  for (const nlohmann::json& e : ntp::testing::events_named(run, "worker_started")) workers.push_back(e["pid"]);
  for (pid_t pid : workers) ::kill(pid, SIGSTOP);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  const std::string output = read_file(out);
  ASSERT_EQ(workers.size(), 4u) << output;
  ASSERT_TRUE(WIFEXITED(status)) << output;
  ASSERT_EQ(WEXITSTATUS(status), 0) << output;
  EXPECT_NE(output.find("verify: pass — "), std::string::npos) << output;
  EXPECT_EQ(ntp::testing::events_named(run, "rank_fenced").size(), 4u) << output;
  const std::vector<nlohmann::json> restarts = ntp::testing::events_named(run, "fallback_restart");
  ASSERT_EQ(restarts.size(), 1u) << output;
  EXPECT_EQ(restarts[0]["tp"], nlohmann::json::array({2, 2}));
  EXPECT_EQ(restarts[0]["lost"], nlohmann::json::array({0, 1, 2, 3}));
  EXPECT_NE(restarts[0]["reason"].get<std::string>().find("every rank was lost"), std::string::npos) << restarts[0];
  EXPECT_EQ(losses(run).size(), 40u);
}

// Ctrl-C during the --verify replay (the run itself done): exit 130 with a
// line that says the run finished and how to check it, and the run's own
// summary lines already out (before: killed by the signal mid-replay, exit
// 130 without a word, the summary lines lost in the pipe's buffer).
TEST_F(CheckpointCliTest, CtrlCDuringTheVerifyReplaySaysTheRunFinished) {
  const fs::path run = dir_ / "verify_interrupted";
  const fs::path out = dir_ / "verify_interrupted.out";
  const pid_t child =
      spawn_train_verify(run, kDp2Tp2 + " --set model.preset=small --set train.micro_batch=4 --set train.steps=16", out);
  wait_for_event(run, "run_finished", 90);
  // timeout(1) passes the signal on to ntp train, as a terminal's Ctrl-C reaches it.
  ::kill(child, SIGINT);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  const std::string output = read_file(out);
  ASSERT_FALSE(ntp::testing::events_named(run, "run_finished").empty()) << "no run_finished within 90 s\n" << output;
  if (output.find("verify: pass — ") != std::string::npos) GTEST_SKIP() << "the replay ended before SIGINT";
  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_EQ(WEXITSTATUS(status), 130) << output;
  EXPECT_NE(output.find("done: 16 steps"), std::string::npos) << output;
  EXPECT_NE(output.find("--verify interrupted (the replay stopped at step "), std::string::npos) << output;
  EXPECT_NE(output.find("check it with: ntp verify " + run.string()), std::string::npos) << output;
}

TEST_F(CheckpointCliTest, EveryRankSavesTheStepsTheCountTheClockAndTheEndAskFor) {
  const std::string job = kModel + " --set parallel.dp=2 --set parallel.tp=2 --set train.steps=6"
                                   " --set train.keep_checkpoints=10";
  // By count: after steps 5 and 6 (the end); by time (a tiny interval): after every step.
  const fs::path by_count = dir_ / "by_count";
  ASSERT_EQ(ntp("train --run-dir " + by_count.string() + job + " --set train.checkpoint_every_s=0").code, 0);
  const fs::path by_time = dir_ / "by_time";
  ASSERT_EQ(ntp("train --run-dir " + by_time.string() + job +
                " --set train.checkpoint_every=0 --set train.checkpoint_every_s=0.001")
                .code,
            0);
  const auto saved = [](const fs::path& run) {
    std::vector<std::int64_t> steps;
    for (const nlohmann::json& e : ntp::testing::events_named(run, "checkpoint_saved")) {
      EXPECT_EQ(e["parts"], 2) << e;  // the two ranks of the writer's replica
      steps.push_back(e["step"].get<std::int64_t>());
    }
    std::sort(steps.begin(), steps.end());
    return steps;
  };
  EXPECT_EQ(saved(by_count), (std::vector<std::int64_t>{5, 6}));
  // By time every step asks; a save still being written when the next is due
  // makes that one skipped (checkpoint_skipped), never waited for.
  std::vector<std::int64_t> asked = saved(by_time);
  for (const nlohmann::json& e : ntp::testing::events_named(by_time, "checkpoint_skipped")) {
    asked.push_back(e["step"].get<std::int64_t>());
  }
  std::sort(asked.begin(), asked.end());
  EXPECT_EQ(asked, (std::vector<std::int64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(saved(by_time).back(), 6) << "the last save is never skipped";
  std::size_t complete = 0;
  for (const auto& entry : fs::directory_iterator(by_time / "checkpoints")) {
    complete += fs::exists(entry.path() / "manifest.json") ? 1 : 0;
  }
  EXPECT_EQ(complete, saved(by_time).size());
}

// A slow disk (every part's write sleeps 1.5 s first): a periodic save due
// while the previous one is still being written is skipped, with the step and
// why, instead of stalling training; the last save is written whole, from
// the state itself (no copy), the run verifies and resumes from it. In one
// process and at dp 2 x tp 2, where the ranks agree through the commit record.
TEST_F(CheckpointCliTest, APeriodicSaveDueWhileThePreviousIsWrittenIsSkippedNotWaitedFor) {
  const std::string slow_disk = "env NTP_TEST_MUTATIONS=1 NTP_TEST_SLOW_SAVE=1.5 ";
  const struct {
    const char* name;
    std::string layout;
  } cases[] = {{"one_process", ""}, {"dp2_tp2", kDp2Tp2}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const fs::path run = dir_ / c.name;
    const ntp::testing::CliRun r = ntp::testing::run_cli(
        slow_disk + "timeout -s KILL " + std::to_string(kTimeLimitS) + " " + NTP_BINARY,
        "train --run-dir " + run.string() + kModel + c.layout +
            " --set train.steps=6 --set train.checkpoint_every=1 --set train.keep_checkpoints=10 --verify");
    ASSERT_EQ(r.exit_code, 0) << r.out + r.err;
    EXPECT_NE(r.out.find("verify: pass — "), std::string::npos) << r.out;
    std::vector<std::int64_t> saved, skipped;
    for (const nlohmann::json& e : ntp::testing::events_named(run, "checkpoint_saved")) {
      saved.push_back(e["step"].get<std::int64_t>());
      EXPECT_EQ(e["copied"], e["step"] != 6) << e;  // the last save writes the state itself
    }
    for (const nlohmann::json& e : ntp::testing::events_named(run, "checkpoint_skipped")) {
      skipped.push_back(e["step"].get<std::int64_t>());
      EXPECT_EQ(e["reason"].get<std::string>().rfind("the save of step ", 0), 0u) << e;
      EXPECT_NE(e["reason"].get<std::string>().find(" is still being written"), std::string::npos) << e;
    }
    std::sort(saved.begin(), saved.end());
    ASSERT_FALSE(saved.empty());
    EXPECT_EQ(saved.front(), 1);
    EXPECT_EQ(saved.back(), 6);
    EXPECT_FALSE(skipped.empty()) << "steps take less than the 1.5 s a save takes: some are due while one is written";
    EXPECT_EQ(saved.size() + skipped.size(), 6u);
    // Training never waited for a save: no update waited for a copy that long.
    for (const nlohmann::json& e : ntp::testing::events_named(run, "checkpoint_copy_waited")) {
      EXPECT_LT(e["seconds"].get<double>(), 1.0) << e;
    }
    const CliResult verified = ntp("verify " + run.string());
    EXPECT_EQ(verified.code, 0) << verified.output;
    // Resumed from the first save in a run of its own, it trains the same steps.
    const fs::path again = dir_ / (std::string(c.name) + "_resumed");
    const CliResult resumed =
        ntp("train --resume " + (run / "checkpoints" / "step-1").string() + " --run-dir " + again.string());
    ASSERT_EQ(resumed.code, 0) << resumed.output;
    const std::vector<double> want = losses(run);
    std::vector<double> got;
    for (const nlohmann::json& row : ntp::testing::read_jsonl_lines(again / "metrics.jsonl")) {
      got.push_back(row["loss"].get<double>());
    }
    EXPECT_EQ(got, std::vector<double>(want.begin() + 1, want.end()));
  }
}

TEST_F(CheckpointCliTest, BadInputIsRefusedNamingWhatIsWrong) {
  const fs::path run = dir_ / "small";
  ASSERT_EQ(ntp("train --run-dir " + run.string() + kModel + " --set train.steps=6 --set parallel.tp=2").code, 0);
  const auto refused = [&](const std::string& args, const std::string& needle) {
    const CliResult r = ntp(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << args << "\n" << r.output;
  };
  refused("train --resume " + (dir_ / "nowhere").string(), "no such file");
  refused("train --resume " + run.string() + " --set train.lr=0.5", "train.lr cannot change");
  refused("train --resume " + run.string() + " --config " + (run / "config.toml").string(), "--config cannot");
  refused("train --resume " + (dir_).string(), "no complete checkpoint");
  // The export of the final checkpoint is the run's model.bin, byte for byte.
  ASSERT_EQ(ntp("export " + run.string() + " --llmc " + (dir_ / "export.bin").string()).code, 0);
  EXPECT_EQ(read_file(dir_ / "export.bin"), read_file(run / "model.bin"));
  // A corrupted part: found before any worker starts.
  const fs::path part = run / "checkpoints" / "step-6" / "rank-1.bin";
  {
    std::fstream f(part, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(64);
    f.put('\x7f');
  }
  refused("train --resume " + run.string() + "", "rank-1.bin: checksum");
  // ... and the refusal names where the run can go on from.
  refused("train --resume " + run.string() + "",
          "; an older checkpoint: ntp train --resume " + (run / "checkpoints" / "step-5").string());
  refused("export " + run.string() + " --llmc " + (dir_ / "bad.bin").string(), "rank-1.bin: checksum");
  // A truncated part (a full disk, a partial copy) shows without reading the
  // bytes: resuming the run directory skips that checkpoint, saying so, and
  // goes on from the newest intact one.
  fs::resize_file(part, fs::file_size(part) / 2);
  const CliResult resumed = ntp("train --resume " + run.string() + " --verify");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("skipping a damaged checkpoint, step-6: "), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("verify: pass — "), std::string::npos) << resumed.output;
  EXPECT_EQ(ntp::testing::events_named(run, "run_resumed").back()["step"], 5);
  EXPECT_TRUE(fs::exists(run / "checkpoints" / "step-6.discarded"));
}

}  // namespace
