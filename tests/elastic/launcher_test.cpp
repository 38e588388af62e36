// The launcher with real worker processes (small shell scripts).
#include "elastic/launcher.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

namespace ntp::elastic {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ntp_launcher_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  LaunchOptions shell(int nproc, const std::string& script) const {
    LaunchOptions o;
    o.nproc = nproc;
    o.store = "file:" + (dir_ / "store").string();
    o.command = {"/bin/sh", "-c", script};
    o.log_dir = dir_ / "logs";
    o.straggler_timeout = 300ms;
    o.term_grace = 2s;
    o.extra_env = {{"OUT", dir_.string()}};
    return o;
  }

  std::string read(const fs::path& path) const {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  fs::path dir_;
};

TEST_F(LauncherTest, EveryWorkerGetsItsPlaceAndItsOwnLog) {
  const LaunchResult result = launch(shell(
      3, "echo \"$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $NTP_STORE\"; "
         "echo \"port=$MASTER_PORT addr=$MASTER_ADDR\" >&2"));
  ASSERT_TRUE(result.ok()) << result.report();
  ASSERT_EQ(result.ranks.size(), 3u);
  for (int rank = 0; rank < 3; ++rank) {
    const std::string log = read(dir_ / "logs" / ("rank-" + std::to_string(rank) + ".log"));
    EXPECT_NE(log.find(std::to_string(rank) + " 3 " + std::to_string(rank) + " 3 0 file:" +
                       (dir_ / "store").string()),
              std::string::npos)
        << log;
    EXPECT_NE(log.find("addr=127.0.0.1"), std::string::npos) << log;
    EXPECT_EQ(log.find("port= "), std::string::npos) << "MASTER_PORT must be set: " << log;
  }
  EXPECT_TRUE(result.report().empty());
}

TEST_F(LauncherTest, ExitCodeOfTheFailedRankIsReportedAndTheOthersAreStopped) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> events;
  LaunchOptions o = shell(3, "if [ \"$RANK\" = 1 ]; then exit 3; fi; sleep 30 & wait");
  o.on_event = [&](const std::string& event, const RankExit& r) {
    events.push_back(event + " " + std::to_string(r.rank));
  };
  const LaunchResult result = launch(o);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 10.0) << "stragglers must be stopped after the deadline";
  EXPECT_FALSE(result.ok());
  ASSERT_TRUE(result.first_failure.has_value());
  EXPECT_EQ(*result.first_failure, 1);
  const RankExit& failed = result.ranks[1];
  EXPECT_TRUE(failed.exited);
  EXPECT_EQ(failed.code, 3);
  EXPECT_FALSE(failed.stopped_by_launcher);
  for (int rank : {0, 2}) {
    EXPECT_TRUE(result.ranks[static_cast<std::size_t>(rank)].stopped_by_launcher);
    EXPECT_EQ(result.ranks[static_cast<std::size_t>(rank)].signal, SIGTERM);
  }
  EXPECT_NE(result.report().find("first failure: rank 1 (pid " + std::to_string(failed.pid) +
                                 ") exited with code 3"),
            std::string::npos)
      << result.report();
  EXPECT_EQ(std::count_if(events.begin(), events.end(),
                          [](const std::string& e) { return e.starts_with("worker_exited"); }),
            3);
}

TEST_F(LauncherTest, DeathBySignalIsReportedWithTheSignal) {
  const LaunchResult result =
      launch(shell(2, "if [ \"$RANK\" = 0 ]; then kill -KILL $$; fi; sleep 30 & wait"));
  ASSERT_TRUE(result.first_failure.has_value());
  EXPECT_EQ(*result.first_failure, 0);
  EXPECT_FALSE(result.ranks[0].exited);
  EXPECT_EQ(result.ranks[0].signal, SIGKILL);
  EXPECT_NE(result.report().find("killed by signal 9"), std::string::npos) << result.report();
}

TEST_F(LauncherTest, WorkersThatIgnoreSigtermAreKilledAfterTheGrace) {
  LaunchOptions o =
      shell(2, "trap '' TERM; if [ \"$RANK\" = 0 ]; then exit 1; fi; while true; do sleep 0.05; done");
  o.term_grace = 300ms;
  const LaunchResult result = launch(o);
  EXPECT_EQ(result.ranks[1].signal, SIGKILL);
  EXPECT_TRUE(result.ranks[1].stopped_by_launcher);
}

// Launches `o` (two workers that touch $OUT/up-$RANK once their trap is
// set) and sends this process SIGTERM once both are up, as a scheduler would.
LaunchResult launch_then_sigterm(const LaunchOptions& o, const fs::path& dir) {
  std::thread sender([&] {
    for (int i = 0; i < 500 && !(fs::exists(dir / "up-0") && fs::exists(dir / "up-1")); ++i) {
      std::this_thread::sleep_for(10ms);
    }
    ::kill(::getpid(), SIGTERM);
  });
  const LaunchResult result = launch(o);
  sender.join();
  return result;
}

TEST_F(LauncherTest, SigtermToTheLauncherIsForwardedToEveryWorker) {
  const LaunchResult result = launch_then_sigterm(
      shell(2, "trap 'echo got-term > \"$OUT/term-$RANK\"; exit 0' TERM; touch \"$OUT/up-$RANK\"; "
               "sleep 30 & wait"),
      dir_);
  EXPECT_EQ(result.forwarded_signal, SIGTERM);
  EXPECT_FALSE(result.ok()) << "an interrupted run is not a success";
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(read(dir_ / ("term-" + std::to_string(rank))), "got-term\n") << "rank " << rank;
    EXPECT_TRUE(result.ranks[static_cast<std::size_t>(rank)].exited);
  }
  EXPECT_NE(result.report().find("received signal 15"), std::string::npos) << result.report();
}

// A worker that dies of another signal while the launcher stops the job
// (here it SIGKILLs itself on the forwarded SIGTERM, as an outside kill
// during a Ctrl-C's save would) is reported as its own death, not as
// "stopped by the launcher"; the one that exits on the signal is.
TEST_F(LauncherTest, AnOutsideKillDuringTheStopIsNotTheLaunchers) {
  const LaunchResult result = launch_then_sigterm(
      shell(2, "if [ \"$RANK\" = 1 ]; then trap 'kill -KILL $$' TERM; else trap 'exit 0' TERM; fi; "
               "touch \"$OUT/up-$RANK\"; sleep 30 & wait"),
      dir_);
  EXPECT_EQ(result.forwarded_signal, SIGTERM);
  EXPECT_TRUE(result.ranks[0].exited);
  EXPECT_TRUE(result.ranks[0].stopped_by_launcher);
  EXPECT_EQ(result.ranks[1].signal, SIGKILL);
  EXPECT_FALSE(result.ranks[1].stopped_by_launcher);
  EXPECT_EQ(result.ranks[1].describe().find("stopped by the launcher"), std::string::npos)
      << result.ranks[1].describe();
}

// A worker found stopped (SIGSTOP) when the job ends is continued with the
// signal, so it takes it at once (its trap exits 7) instead of sitting out the
// grace until SIGKILL; the report says it was found stopped.
TEST_F(LauncherTest, AStoppedWorkerIsContinuedToTakeTheStopSignal) {
  LaunchOptions o = shell(2, "if [ \"$RANK\" = 1 ]; then trap 'exit 7' TERM; touch \"$OUT/stopping\"; kill -STOP $$; "
                             "sleep 30; fi; while [ ! -e \"$OUT/stopping\" ]; do sleep 0.01; done; sleep 0.2; exit 1");
  o.term_grace = 20s;
  const auto start = std::chrono::steady_clock::now();
  const LaunchResult result = launch(o);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const RankExit& stopped = result.ranks[1];
  EXPECT_TRUE(stopped.found_stopped) << result.report();
  EXPECT_TRUE(stopped.exited) << stopped.describe();
  EXPECT_EQ(stopped.code, 7) << stopped.describe();
  EXPECT_LT(seconds, 10.0) << "the stopped worker sat out the grace";
  EXPECT_NE(stopped.describe().find("it had been stopped, SIGSTOP"), std::string::npos) << stopped.describe();
}

// A launcher loop that throws (a watcher that lost the job's store) kills and
// reaps every worker and what it started before the error leaves launch():
// no process of the job outlives the launcher's verdict, even while the
// launcher process itself lives on (the workers' parent-death signal would
// only fire when it exits).
TEST_F(LauncherTest, AnErrorInTheLaunchersLoopLeavesNoWorkerNorItsChildren) {
  LaunchOptions o = shell(2, "sleep 30 & echo $! > \"$OUT/child-$RANK\"; wait");
  o.on_tick = [&] {
    if (fs::exists(dir_ / "child-0") && fs::exists(dir_ / "child-1")) throw std::runtime_error("store lost");
  };
  std::vector<pid_t> pids;
  o.on_event = [&](const std::string& event, const RankExit& r) {
    if (event == "worker_started") pids.push_back(r.pid);
  };
  EXPECT_THROW(launch(o), std::runtime_error);
  ASSERT_EQ(pids.size(), 2u);
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream child_file(dir_ / ("child-" + std::to_string(rank)));
    pid_t child = 0;
    ASSERT_TRUE(child_file >> child) << "rank " << rank << " wrote no child pid";
    pids.push_back(child);
  }
  // A killed grandchild is reaped by init (or a subreaper), so allow a moment.
  const auto alive = [](pid_t pid) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string skip, state;
    return static_cast<bool>(stat >> skip >> skip >> state) && state != "Z";
  };
  for (pid_t pid : pids) {
    for (int i = 0; i < 100 && alive(pid); ++i) std::this_thread::sleep_for(10ms);
    EXPECT_FALSE(alive(pid)) << "pid " << pid << " outlived the launcher's error";
  }
}

// A worker that SIGKILL does not end (stuck in the kernel: a hung GPU driver
// or file system) must not hold the launcher forever, neither at the end of
// the grace nor when the launcher's loop fails: after kill_wait it is
// reported and left behind. A signal the worker ignores stands in for the
// SIGKILL it cannot take.
TEST_F(LauncherTest, AWorkerThatOutlivesSigkillIsLeftBehindNotWaitedFor) {
  const std::string script =
      "trap '' TERM USR1; touch \"$OUT/up-$RANK\"; if [ \"$RANK\" = 0 ]; then exit 1; fi; "
      "while true; do sleep 0.05; done";
  std::vector<pid_t> pids;
  std::vector<std::string> events;
  const auto stuck_case = [&] {
    LaunchOptions o = shell(2, script);
    o.term_grace = 300ms;
    o.kill_wait = 500ms;
    o.kill_signal = SIGUSR1;
    events.clear();
    o.on_event = [&](const std::string& event, const RankExit& r) {
      events.push_back(event);
      if (event == "worker_started") pids.push_back(r.pid);
    };
    return o;
  };
  // launch(o) with a deadline: past it the test fails naming the wait, and the
  // stand-ins get the real SIGKILL so that launch() returns.
  const auto launch_within = [&](const LaunchOptions& o, const char* what) {
    auto done = std::async(std::launch::async, [&] { return launch(o); });
    if (done.wait_for(10s) != std::future_status::ready) {
      ADD_FAILURE() << what << " waited for a worker that does not die";
      for (pid_t pid : pids) ::kill(-pid, SIGKILL);
    }
    return done;
  };
  {
    const LaunchResult result = launch_within(stuck_case(), "the launcher").get();
    const RankExit& stuck = result.ranks[1];
    EXPECT_TRUE(stuck.unkillable);
    EXPECT_TRUE(stuck.stopped_by_launcher);
    EXPECT_FALSE(stuck.running);
    EXPECT_NE(result.report().find("rank 1 (pid " + std::to_string(stuck.pid) + ") did not die after SIGKILL"),
              std::string::npos)
        << result.report();
    EXPECT_EQ(std::count(events.begin(), events.end(), "worker_unkillable"), 1) << "no event says so";
  }
  {
    // The launcher's loop throws (its store lost, say) while a worker cannot die.
    fs::remove(dir_ / "up-0");
    fs::remove(dir_ / "up-1");
    LaunchOptions o = stuck_case();
    o.on_tick = [&] {  // once rank 1's trap is set
      if (fs::exists(dir_ / "up-1")) throw std::runtime_error("store lost");
    };
    EXPECT_THROW(launch_within(o, "the failed launcher").get(), std::runtime_error);
  }
  for (pid_t pid : pids) ::kill(-pid, SIGKILL);  // the stand-ins do die of the real one
  for (pid_t pid : pids) ::waitpid(pid, nullptr, 0);
}

// A worker the caller SIGKILLed (`ntp train` fencing a rank) that is still
// there kill_wait later is left behind too, so the job's end does not wait
// for it. Here the caller only says it killed rank 1, which goes on looping,
// as a worker stuck in the kernel would stay.
TEST_F(LauncherTest, AWorkerTheCallerKilledThatDoesNotDieIsLeftBehind) {
  LaunchOptions o = shell(2, "if [ \"$RANK\" = 0 ]; then sleep 1; exit 0; fi; while true; do sleep 0.05; done");
  o.kill_wait = 300ms;
  pid_t fenced = 0;
  o.on_event = [&](const std::string& event, const RankExit& r) {
    if (event == "worker_started" && r.rank == 1) fenced = r.pid;
  };
  o.killed = [&](pid_t pid) { return pid == fenced; };
  auto done = std::async(std::launch::async, [&] { return launch(o); });
  if (done.wait_for(10s) != std::future_status::ready) {
    ADD_FAILURE() << "the launcher waited for a fenced worker that does not die";
    ::kill(-fenced, SIGKILL);
  }
  const LaunchResult result = done.get();
  EXPECT_TRUE(result.ranks[0].ok());
  EXPECT_TRUE(result.ranks[1].unkillable) << result.report();
  // Lost like a rank that died of the fencing, so in-job recovery tolerates it.
  EXPECT_FALSE(result.ranks[1].stopped_by_launcher);
  ::kill(-fenced, SIGKILL);
  ::waitpid(fenced, nullptr, 0);
}

// exec's failure comes back through a close-on-exec pipe: the launcher names
// the command and the reason instead of a bare exit code 127.
TEST_F(LauncherTest, AMissingProgramIsReportedWithTheCommandAndTheReason) {
  LaunchOptions o = shell(2, "");
  o.command = {(dir_ / "no-such-program").string(), "--flag"};
  try {
    launch(o);
    FAIL() << "a missing program was started";
  } catch (const ExecError& e) {
    EXPECT_NE(std::string(e.what()).find((dir_ / "no-such-program").string() + " --flag"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos) << e.what();
  }
}

TEST(Launcher, UnderSlurmTheSlurmJobIdNamesTheJobOnRedis) {
  const Environment env = {{"SLURM_JOB_ID", "4242"}};
  LaunchOptions redis;
  redis.store = "redis://head:6379/team";
  apply_slurm_nodes(redis, env, false);
  EXPECT_EQ(redis.store, "redis://head:6379/team?job=slurm-4242");
  LaunchOptions named;
  named.store = "redis://head:6379?job=mine";
  apply_slurm_nodes(named, env, false);
  EXPECT_EQ(named.store, "redis://head:6379?job=mine");
  LaunchOptions file;
  file.store = "file:/run/store";
  apply_slurm_nodes(file, env, false);
  EXPECT_EQ(file.store, "file:/run/store");
}

}  // namespace
}  // namespace ntp::elastic
