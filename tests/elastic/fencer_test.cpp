// The launcher's watch over the other hosts' ranks (Fencer::watch_remote),
// through a real file store: who may declare a rank lost with its host.
#include "elastic/fencer.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "comm/heartbeat.h"
#include "elastic/membership.h"
#include "tests/support/test_dir.h"

namespace ntp::elastic {
namespace {

namespace fs = std::filesystem;

std::int64_t wall_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

class FencerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::fresh_test_dir("ntp_fencer");
    fs::create_directories(dir_ / "store");
    store_ = comm::open_store("file:" + (dir_ / "store").string());
    run_ = std::make_unique<train::RunDir>(train::RunDir::create(dir_ / "run"));
    config_.deadline.heartbeat_s = 1.0;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A mark written `age_ms` ago: a rank's heartbeat or a launcher's.
  void beat(const std::string& key, std::int64_t age_ms) {
    store_->set(key, comm::to_bytes(std::to_string(wall_ms() - age_ms) + " 1"));
  }
  // Polls past the watcher's interval (deadline.heartbeat_s / 5).
  void poll(Fencer& fencer) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    fencer.poll();
  }
  // A local worker that idles (no CPU) in its own process group; 0 if fork failed.
  static pid_t paused_worker() {
    const pid_t worker = ::fork();
    if (worker == 0) {
      ::pause();
      ::_exit(0);
    }
    if (worker < 0) return 0;
    ::setpgid(worker, worker);
    return worker;
  }
  static void started(Fencer& fencer, int rank, pid_t pid) {
    RankExit record;
    record.rank = rank;
    record.pid = pid;
    fencer.on_event("worker_started", record);
  }
  bool declared(int rank) {
    const auto mark = store_->try_get(dead_key(rank));
    return mark && comm::to_text(*mark) == kLostWithHost;
  }

  fs::path dir_;
  std::shared_ptr<comm::Store> store_;
  std::unique_ptr<train::RunDir> run_;
  train::Config config_;
};

TEST_F(FencerTest, AHostWhoseLauncherStillBeatsAnswersForItsRanksItself) {
  Fencer fencer(config_, *run_, store_);
  fencer.watch_remote(0, {{1, {4, 5}}});
  beat(comm::heartbeat_key(4), 5000);  // starved, say: its own launcher judges that
  beat(comm::heartbeat_key(5), 0);
  beat(host_beat_key(1), 0);
  poll(fencer);
  EXPECT_FALSE(store_->try_get(dead_key(4)));
  EXPECT_FALSE(store_->try_get(fence_key(4)));
  // Host 1 gone whole: its launcher's beat goes stale with its ranks'.
  beat(host_beat_key(1), 5000);
  poll(fencer);
  EXPECT_TRUE(declared(4));
  EXPECT_TRUE(store_->try_get(fence_key(4)));
  EXPECT_FALSE(store_->try_get(dead_key(5)));  // its beat is fresh
  // And the workers' loss watch (loss_watch.h) is told, once.
  poll(fencer);
  const auto lost = store_->items(lost_list_key());
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(comm::to_text(lost[0]), "4");
}

// A rank cut off with its host stops once it cannot renew its lease; the
// watcher must not act before the store has dropped that lease, however
// stale the beats (a beat says nothing about whether the rank still runs).
TEST_F(FencerTest, ARemoteRankIsDeclaredLostOnlyOnceItsLeaseEndedOnTheStore) {
  Fencer fencer(config_, *run_, store_);
  fencer.watch_remote(0, {{1, {4, 5}}});
  beat(comm::heartbeat_key(4), 5000);
  beat(comm::heartbeat_key(5), 5000);
  beat(host_beat_key(1), 5000);
  store_->set_expiring(comm::lease_key(4), comm::to_bytes("1"), std::chrono::milliseconds(800));
  store_->set_expiring(comm::lease_key(5), comm::to_bytes("1"), std::chrono::milliseconds(60000));
  poll(fencer);
  EXPECT_FALSE(store_->try_get(dead_key(4))) << "declared lost while the store still held its lease";
  EXPECT_FALSE(store_->try_get(fence_key(4)));
  for (int i = 0; i < 8 && !declared(4); ++i) poll(fencer);  // rank 4's lease ends (polls close together)
  EXPECT_TRUE(declared(4));
  EXPECT_TRUE(store_->try_get(fence_key(4)));
  EXPECT_FALSE(store_->try_get(dead_key(5)));  // still holds its lease
  store_->erase(comm::lease_key(5));
  poll(fencer);
  EXPECT_TRUE(declared(5));
}

TEST_F(FencerTest, ItWritesItsOwnBeatWhileOtherHostsWatch) {
  Fencer fencer(config_, *run_, store_);
  fencer.watch_remote(1, {{0, {0, 1}}});
  fencer.poll();
  const auto mark = store_->try_get(host_beat_key(1));
  ASSERT_TRUE(mark);
  EXPECT_LE(wall_ms() - std::stoll(comm::to_text(*mark)), 1000);
  Fencer alone(config_, *run_, store_);  // one host: nobody watches, no beat
  alone.poll();
  EXPECT_FALSE(store_->try_get(host_beat_key(0)));
}

// Host 1 was cut off from the store; host 0 declared its ranks lost. Back on
// the network, host 1 sees host 0's beats stale (they were, from where it
// stood) but it is the one that was lost: it declares nobody.
TEST_F(FencerTest, AHostCutOffDeclaresNobodyLostWhenItIsBack) {
  const pid_t worker = paused_worker();
  ASSERT_GT(worker, 0);
  Fencer fencer(config_, *run_, store_);
  fencer.watch_remote(1, {{0, {0, 1}}});
  started(fencer, 4, worker);
  store_->set(fence_key(4), comm::to_bytes(kLostWithHost));
  store_->set(dead_key(4), comm::to_bytes(kLostWithHost));
  beat(comm::heartbeat_key(0), 5000);
  beat(comm::heartbeat_key(1), 5000);
  beat(host_beat_key(0), 5000);
  poll(fencer);
  EXPECT_FALSE(store_->try_get(dead_key(0)));
  EXPECT_FALSE(store_->try_get(fence_key(1)));
  // Its own rank, declared lost by the others, is fenced (killed) here.
  int status = 0;
  ASSERT_EQ(::waitpid(worker, &status, 0), worker);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  // Its own report of the exit leaves the others' verdict as it was: the
  // lowest host left reads it to know it writes the run's summary in node 0's
  // place (host 0 cut off and back: "fenced" or "exited" over it kept host 1 from it).
  RankExit exit;
  exit.rank = 4;
  exit.pid = worker;
  exit.running = false;
  exit.signal = SIGKILL;
  fencer.on_event("worker_exited", exit);
  EXPECT_TRUE(declared(4)) << "dead mark overwritten: " << comm::to_text(*store_->try_get(dead_key(4)));
}

// A local rank's beat is judged by whether it changes, on the launcher's own
// clock: beats whose wall times read 10 s old (written just before the clock
// stepped forward 10 s) but keep coming are fresh; once they stop, the rank
// is fenced after deadline.heartbeat_s. (Comparing wall times fenced it at
// the first poll: the worker, idle in pause(), had no CPU to vouch for it.)
TEST_F(FencerTest, ALocalBeatIsJudgedByItsChangesNotItsWallTime) {
  const pid_t worker = paused_worker();
  ASSERT_GT(worker, 0);
  Fencer fencer(config_, *run_, store_);
  started(fencer, 0, worker);
  const auto beat_old = [&](int n) {
    store_->set(comm::heartbeat_key(0), comm::to_bytes(std::to_string(wall_ms() - 10000) + " " + std::to_string(n)));
  };
  const auto fenced = [&] { return store_->try_get(dead_key(0)).has_value(); };
  for (int n = 1; n <= 8; ++n) {  // 2 s of beats, twice deadline.heartbeat_s
    beat_old(n);
    poll(fencer);
    ASSERT_FALSE(fenced()) << "fenced at beat " << n << " although its beats keep coming";
  }
  for (int i = 0; i < 8 && !fenced(); ++i) poll(fencer);  // no new beat: stale after 1 s here
  EXPECT_TRUE(fenced()) << "a beat that stopped changing was not judged stale";
  int status = 0;
  ASSERT_EQ(::waitpid(worker, &status, 0), worker);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

}  // namespace
}  // namespace ntp::elastic
