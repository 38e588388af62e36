#include "train/run_dir.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <atomic>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "train/config.h"
#include "train/progress.h"
#include "train/trace.h"

namespace ntp::train {
namespace {

namespace fs = std::filesystem;

class RunDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ntp_run_dir_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

StepMetrics sample_metrics(std::int64_t step) {
  StepMetrics m;
  m.step = step;
  m.epoch = 0;
  m.loss = 5.0 - 0.5 * static_cast<double>(step);
  m.lr = 1e-3;
  m.grad_norm = 2.5;
  m.tokens = 8 * 64;
  m.samples = {3, 5};
  m.tp = {3, 4};
  m.step_time_s = step == 0 ? 10.0 : 2.0;
  m.exposed_sync_s = step == 0 ? 5.0 : 0.1;
  m.sync_wait_max_s = step == 0 ? 6.0 : 0.3;
  m.reshard_bytes = 1000;
  m.allreduce_bytes = 4000;
  return m;
}

TEST(Metrics, JsonRoundTripAndMissingFieldNamed) {
  const StepMetrics m = sample_metrics(3);
  nlohmann::json j = to_json(m);
  for (const char* key : {"step", "loss", "lr", "grad_norm", "tokens", "samples", "tp",
                          "step_time_s", "exposed_sync_s", "sync_wait_max_s", "reshard_bytes"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(step_metrics_from_json(j), m);
  j.erase("grad_norm");
  try {
    step_metrics_from_json(j);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("grad_norm"), std::string::npos);
  }
}

TEST(Metrics, PowerDecisionsRoundTripAndAreAbsentWhenPowerIsOff) {
  StepMetrics m = sample_metrics(1);
  EXPECT_FALSE(to_json(m).contains("power"));
  EXPECT_FALSE(summarize({m}, 1.0).contains("final_power"));
  m.power = {{1300.0, 1.1859}, {1000.0, 1.0}};
  nlohmann::json j = to_json(m);
  EXPECT_EQ(j["power"], nlohmann::json::parse(
                            R"([{"limit_w": 1300.0, "speedup": 1.1859}, {"limit_w": 1000.0, "speedup": 1.0}])"));
  EXPECT_EQ(step_metrics_from_json(j), m);
  EXPECT_EQ(summarize({m}, 1.0)["final_power"], j["power"]);
  j["power"][1].erase("speedup");
  EXPECT_THROW(step_metrics_from_json(j), std::runtime_error);
}

TEST(Metrics, SummaryLeavesTheWarmUpStepOutOfRates) {
  const std::vector<StepMetrics> steps = {sample_metrics(0), sample_metrics(1), sample_metrics(2)};
  const nlohmann::json s = summarize(steps, 20.0);
  EXPECT_EQ(s["steps"], 3);
  EXPECT_DOUBLE_EQ(s["first_loss"].get<double>(), 5.0);
  EXPECT_DOUBLE_EQ(s["last_loss"].get<double>(), 4.0);
  EXPECT_EQ(s["tokens"], 3 * 512);
  EXPECT_DOUBLE_EQ(s["mean_step_time_s"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(s["tokens_per_s"].get<double>(), 256.0);
  EXPECT_DOUBLE_EQ(s["exposed_sync_fraction"].get<double>(), 0.05);
  EXPECT_DOUBLE_EQ(s["sync_wait_max_fraction"].get<double>(), 0.15);
  EXPECT_DOUBLE_EQ(s["reshard_bytes_per_step"].get<double>(), 1000.0);
  EXPECT_EQ(summarize({}, 1.0)["steps"], 0);
}

TEST(StepClock, IntervalBetweenConsecutiveCommitsLessOffClockTime) {
  StepClock clock;
  EXPECT_EQ(clock.commit(0, 1, 100.0), std::nullopt);  // no previous commit
  EXPECT_EQ(clock.commit(1, 1, 100.5), 0.5);
  clock.off_clock(2.0);  // a validation pass between the steps
  EXPECT_EQ(clock.commit(2, 1, 103.0), 0.5);
  EXPECT_EQ(clock.commit(3, 2, 110.0), std::nullopt);  // a recovery: a new epoch
  EXPECT_EQ(clock.commit(4, 2, 110.25), 0.25);
  EXPECT_EQ(clock.commit(4, 3, 111.0), std::nullopt);  // the same step redone
  EXPECT_EQ(clock.commit(6, 3, 112.0), std::nullopt);  // a step left out
}

TEST(Metrics, ProgressLineAndDurations) {
  const std::string line = progress_line(sample_metrics(1), 20, 12.0);
  // Step numbers count from 0, as in metrics.jsonl and every message.
  EXPECT_EQ(line.rfind("step 1 (2 of 20)", 0), 0u) << line;
  EXPECT_EQ(line.find("val "), std::string::npos) << line;
  EXPECT_NE(line.find("loss 4.5000"), std::string::npos) << line;
  EXPECT_NE(line.find("256 tok/s"), std::string::npos) << line;
  EXPECT_NE(line.find("tp [3,4]"), std::string::npos) << line;
  EXPECT_NE(line.find("eta 1:48"), std::string::npos) << line;  // 6 s/step x 18 steps
  StepMetrics evaluated = sample_metrics(1);
  evaluated.val_loss = 4.25;
  EXPECT_NE(progress_line(evaluated, 20, 12.0).find("loss 4.5000  val 4.2500"), std::string::npos);
  EXPECT_EQ(step_metrics_from_json(to_json(evaluated)), evaluated);
  EXPECT_EQ(to_json(sample_metrics(1)).count("val_loss"), 0u);
  EXPECT_EQ(summarize({sample_metrics(0), evaluated, sample_metrics(2)}, 1.0)["last_val_loss"], 4.25);
  EXPECT_EQ(format_duration(59.6), "1:00");
  EXPECT_EQ(format_duration(3723), "1:02:03");
}

TEST(Progress, PlainLinesOffATerminalOneRedrawnLineOnIt) {
  for (bool live : {false, true}) {
    std::FILE* out = std::tmpfile();
    Progress progress(out, 3, live);
    progress.update(sample_metrics(0), 1.0);
    progress.update(sample_metrics(1), 2.0);
    progress.finish();
    std::rewind(out);
    std::string text;
    for (int ch; (ch = std::fgetc(out)) != EOF;) text += static_cast<char>(ch);
    std::fclose(out);
    const auto newlines = std::count(text.begin(), text.end(), '\n');
    const auto returns = std::count(text.begin(), text.end(), '\r');
    EXPECT_EQ(newlines, live ? 1 : 2) << text;
    EXPECT_EQ(returns, live ? 2 : 0) << text;
  }
}

TEST_F(RunDirTest, WritesEveryFileAndRefusesToOverwriteARun) {
  const RunDir run = RunDir::create(dir_);
  EXPECT_TRUE(fs::is_directory(run.log_dir()));
  run.write_config("[train]\nsteps = 2\n");
  run.append_metrics(sample_metrics(0));
  run.append_metrics(sample_metrics(1));
  run.append_schedule(0, 0, {{4, 1}, {7}});
  run.event("run_started", {{"ranks", 8}});
  run.write_summary(summarize(run.read_metrics(), 3.0));

  EXPECT_EQ(run.read_metrics(), (std::vector<StepMetrics>{sample_metrics(0), sample_metrics(1)}));
  const auto events = run.read_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["event"], "run_started");
  EXPECT_EQ(events[0]["ranks"], 8);
  EXPECT_GT(events[0]["time"].get<double>(), 1.7e9);
  const auto schedule = read_jsonl(run.file("schedule.jsonl"));
  EXPECT_EQ(schedule[0]["samples"], nlohmann::json::parse("[[4,1],[7]]"));
  std::ifstream summary(run.file("summary.json"));
  EXPECT_EQ(nlohmann::json::parse(summary)["steps"], 2);

  try {
    RunDir::create(dir_);
    FAIL() << "a second run in the same directory must be refused";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(dir_.string()), std::string::npos);
  }
}

TEST_F(RunDirTest, LinesFromManyProcessesNeverInterleave) {
  const RunDir run = RunDir::create(dir_);
  constexpr int kProcs = 4;
  constexpr int kLines = 300;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcs; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      JsonlWriter writer(run.file("events.jsonl"));
      const std::string padding(200, 'x');  // lines longer than a trivial write
      for (int i = 0; i < kLines; ++i) writer.append({{"rank", p}, {"i", i}, {"pad", padding}});
      ::_exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  const auto lines = read_jsonl(run.file("events.jsonl"));  // throws on a torn line
  ASSERT_EQ(lines.size(), static_cast<std::size_t>(kProcs * kLines));
  std::set<std::pair<int, int>> seen;
  for (const auto& line : lines) seen.insert({line["rank"].get<int>(), line["i"].get<int>()});
  EXPECT_EQ(seen.size(), lines.size());
}

// A full disk, simulated by a file size limit that the third line crosses:
// the append fails naming the file and the reason, the torn part is taken
// back, and a line appended once there is room again parses (before: the
// torn line glued to the next one, and a resume failed reading the file).
TEST_F(RunDirTest, ALineThatDoesNotFitLeavesNoTornLineBehind) {
  const RunDir run = RunDir::create(dir_);
  const std::filesystem::path events = run.file("events.jsonl");
  const std::string padding(100, 'x');
  run.event("first", {{"pad", padding}});
  const auto fitting = static_cast<rlim_t>(std::filesystem::file_size(events) * 5 / 2);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);  // the write fails with EFBIG instead of killing the process
    const rlimit limit{fitting, fitting};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(10);
    run.event("second", {{"pad", padding}});
    try {
      run.event("third", {{"pad", padding}});
      ::_exit(11);
    } catch (const std::runtime_error& e) {
      const std::string text = e.what();
      const bool named = text.find(events.string()) != std::string::npos &&
                         text.find(std::strerror(EFBIG)) != std::string::npos;
      ::_exit(named ? 0 : 12);
    }
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  ASSERT_EQ(WEXITSTATUS(status), 0) << "10: no limit set; 11: the third line fitted; 12: the error did not name "
                                       "the file and its reason";
  run.event("fourth", nlohmann::json::object());
  const auto lines = read_jsonl(events);  // throws on a torn line
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1]["event"], "second");
  EXPECT_EQ(lines[2]["event"], "fourth");
}

TEST_F(RunDirTest, TailReadsOnlyCompleteLines) {
  const RunDir run = RunDir::create(dir_);
  JsonlTail tail(run.file("metrics.jsonl"));
  EXPECT_TRUE(tail.read_new().empty());  // file not there yet
  run.append_metrics(sample_metrics(0));
  {
    std::ofstream partial(run.file("metrics.jsonl"), std::ios::app);
    partial << "{\"step\": 1, \"lo";
  }
  auto first = tail.read_new();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0]["step"], 0);
  {
    std::ofstream rest(run.file("metrics.jsonl"), std::ios::app);
    rest << "ss\": 2.0}\n";
  }
  auto second = tail.read_new();
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0]["loss"], 2.0);
  EXPECT_TRUE(tail.read_new().empty());
}

TEST_F(RunDirTest, TraceFragmentsMergeIntoOneChromeTrace) {
  fs::create_directories(dir_);
  const double start = 1000.0;
  for (int rank = 0; rank < 2; ++rank) {
    TraceRecorder compute(rank, "rank " + std::to_string(rank), start);
    TraceRecorder comm(rank, "rank " + std::to_string(rank), start);
    compute.add({"backward", Track::kCompute, start + 0.5, 0.25, 1});
    comm.add({"all-reduce b0", Track::kComm, start + 0.6, 0.1, 1});
    compute.append(comm);
    compute.write(dir_ / "trace" / ("rank-" + std::to_string(rank) + ".json"));
  }
  EXPECT_EQ(merge_traces(dir_ / "trace", dir_ / "trace.json"), 2);
  std::ifstream in(dir_ / "trace.json");
  const nlohmann::json trace = nlohmann::json::parse(in);
  int spans = 0;
  std::set<int> pids;
  for (const auto& event : trace["traceEvents"]) {
    if (event["ph"] != "X") continue;
    ++spans;
    pids.insert(event["pid"].get<int>());
    if (event["name"] == "backward") {
      EXPECT_DOUBLE_EQ(event["ts"].get<double>(), 0.5e6);
      EXPECT_DOUBLE_EQ(event["dur"].get<double>(), 0.25e6);
      EXPECT_EQ(event["tid"], 0);
      EXPECT_EQ(event["cat"], "compute");
    } else {
      EXPECT_EQ(event["tid"], 1);
      EXPECT_EQ(event["cat"], "comm");
    }
  }
  EXPECT_EQ(spans, 4);
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
}

}  // namespace
}  // namespace ntp::train

namespace ntp::train {
namespace {

TEST_F(RunDirTest, ConcurrentRunsOnOneFolderLetExactlyOneIn) {
  constexpr int kRuns = 8;
  std::atomic<int> created{0};
  std::atomic<int> refused{0};
  std::vector<std::thread> runs;
  for (int i = 0; i < kRuns; ++i) {
    runs.emplace_back([&] {
      try {
        RunDir::create(dir_);
        ++created;
      } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("already holds a run"), std::string::npos) << e.what();
        ++refused;
      }
    });
  }
  for (std::thread& t : runs) t.join();
  EXPECT_EQ(created.load(), 1);
  EXPECT_EQ(refused.load(), kRuns - 1);
}

// A live job holds its directory: another process (a --resume while the run
// trains) is refused, naming the holder; once the holder dies, SIGKILL
// included, the directory is free again without any clean-up.
TEST_F(RunDirTest, ALiveJobHoldsItsDirectoryUntilItDies) {
  fs::create_directories(dir_);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t holder = ::fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    const RunLock lock(dir_);
    const char byte = 1;
    if (::write(ready[1], &byte, 1) != 1) ::_exit(1);
    ::pause();  // until SIGKILL
    ::_exit(0);
  }
  ::close(ready[1]);
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1) << "the holder did not take the lock";
  ::close(ready[0]);
  try {
    const RunLock second(dir_);
    ADD_FAILURE() << "a second job got the directory of a live one";
  } catch (const RunDirBusy& e) {
    EXPECT_NE(std::string(e.what()).find("pid " + std::to_string(holder) + " on "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(dir_.string()), std::string::npos) << e.what();
  }
  ::kill(holder, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(holder, &status, 0), holder);
  EXPECT_NO_THROW(RunLock{dir_});
  {
    // Within one process too: the lock belongs to its holder, not to the pid.
    const RunLock first(dir_);
    EXPECT_THROW(RunLock{dir_}, RunDirBusy);
  }
  EXPECT_NO_THROW(RunLock{dir_});
}

TEST_F(RunDirTest, NewRunFoldersAreUniqueWithinOneMillisecond) {
  constexpr int kRuns = 16;
  std::vector<fs::path> paths(kRuns);
  std::vector<std::thread> runs;
  for (int i = 0; i < kRuns; ++i) {
    runs.emplace_back([&, i] { paths[static_cast<std::size_t>(i)] = create_new_run_dir(dir_); });
  }
  for (std::thread& t : runs) t.join();
  const std::set<fs::path> distinct(paths.begin(), paths.end());
  EXPECT_EQ(distinct.size(), paths.size());
  for (const fs::path& p : paths) {
    EXPECT_TRUE(fs::is_directory(p)) << p;
    EXPECT_EQ(p.parent_path(), dir_);
    EXPECT_NO_THROW(RunDir::create(p)) << p;  // each one is free for its run
  }
}

TEST_F(RunDirTest, AFileIsNotARunFolder) {
  { std::ofstream(dir_.string()) << "x"; }
  try {
    RunDir::create(dir_);
    FAIL() << "a file accepted as a run folder";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("is not a folder"), std::string::npos) << e.what();
  }
  fs::remove(dir_);
}

}  // namespace
}  // namespace ntp::train
