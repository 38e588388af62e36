// Giving up early, with ranks as threads over loopback Gloo and deadlines of
// 10 s: abort() from another thread frees a call blocked in Gloo within a
// second (not at the deadline), the aborting rank's peer fails as fast, and
// the group is destroyed at once afterwards; create_group gives up within a
// second once GroupOptions::is_dead reports a member — in the join wait, in
// the wait for its address, and in a connect blocked on it (which Gloo alone
// bounds by 5x the deadline, shown by a control test).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <iostream>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include <gloo/transport/tcp/address.h>

#include "comm/gloo_mesh.h"
#include "comm/rendezvous.h"
#include "tests/comm/thread_ranks.h"

namespace ntp::comm {
namespace {

using namespace std::chrono_literals;
using testing::group_options;
using testing::run_threads;
using testing::TempStoreDir;
using clock_type = std::chrono::steady_clock;

double seconds_between(clock_type::time_point from, clock_type::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

void report(const std::string& what, double seconds) {
  std::cout << "[ latency ] " << what << ": " << static_cast<long long>(seconds * 1000.0) << " ms" << std::endl;
}

// Rank 1 never calls all_reduce; rank 0 blocks in it until a watchdog thread
// aborts the group.
TEST(Abort, FreesACallBlockedInGlooOnAnotherThread) {
  TempStoreDir dir;
  auto store = open_store(dir.spec());
  std::promise<void> rank0_done;
  auto rank0_finished = rank0_done.get_future();
  clock_type::time_point aborted_at, failed_at, destroyed_at;
  auto errors = run_threads(2, [&](int rank) {
    auto g = create_group(store, group_options(2, rank, "abort-blocked", 1, 10s));
    if (rank == 1) {
      rank0_finished.wait_for(30s);  // keeps its end open, never calls
      return;
    }
    std::thread watchdog([&] {
      std::this_thread::sleep_for(200ms);
      aborted_at = clock_type::now();
      g->abort("watchdog: rank 1 is stale");
    });
    std::vector<float> x(1000, 1.0f);
    try {
      g->all_reduce(x.data(), x.size());
      ADD_FAILURE() << "all_reduce returned without rank 1";
    } catch (const CommError& e) {
      failed_at = clock_type::now();
      EXPECT_EQ(e.kind(), CommErrorKind::kBroken) << e.what();
      EXPECT_NE(std::string(e.what()).find("watchdog: rank 1 is stale"), std::string::npos) << e.what();
    }
    watchdog.join();
    g.reset();
    destroyed_at = clock_type::now();
    rank0_done.set_value();
  });
  testing::rethrow_first(errors);
  report("abort -> blocked all_reduce fails", seconds_between(aborted_at, failed_at));
  report("abort -> group destroyed", seconds_between(aborted_at, destroyed_at));
  EXPECT_LT(seconds_between(aborted_at, failed_at), 1.0);
  EXPECT_LT(seconds_between(aborted_at, destroyed_at), 1.0);
}

// A rank declared lost from outside the transport (its host cut off: its
// sockets never close): abort_groups_with(1) frees rank 0's call blocked on
// it in group {0, 1} within a second, not at the 10 s deadline, and leaves
// group {0, 2}, which rank 1 is not in, working. (Ranks are threads here, so
// both members of {0, 1} are this process's.)
TEST(Abort, AbortGroupsWithBreaksOnlyTheGroupsOfTheLostRank) {
  TempStoreDir dir;
  auto store = open_store(dir.spec());
  std::promise<void> rank0_done;
  auto rank0_finished = rank0_done.get_future().share();
  clock_type::time_point aborted_at, failed_at;
  int aborted = -1;
  const auto pair_options = [](int a, int b, int rank, const std::string& name) {
    GroupOptions o = group_options(2, rank, name, 1, 10s);
    o.ranks = {a, b};
    return o;
  };
  auto errors = run_threads(3, [&](int rank) {
    std::vector<float> x(1000, 1.0f);
    if (rank == 1) {
      auto lost = create_group(store, pair_options(0, 1, 1, "lost-pair"));
      rank0_finished.wait_for(30s);  // keeps its end open, never calls
      return;
    }
    auto other = create_group(store, pair_options(0, 2, rank, "other-pair"));
    if (rank == 2) {
      rank0_finished.wait_for(30s);
      other->all_reduce(x.data(), x.size());
      EXPECT_EQ(x[0], 2.0f);
      return;
    }
    auto lost = create_group(store, pair_options(0, 1, 0, "lost-pair"));
    EXPECT_EQ(abort_groups_with(7, "nobody"), 0);
    std::thread watchdog([&] {
      std::this_thread::sleep_for(200ms);
      aborted_at = clock_type::now();
      aborted = abort_groups_with(1, "rank 1 was declared lost with its host");
    });
    try {
      lost->all_reduce(x.data(), x.size());
      ADD_FAILURE() << "all_reduce returned without rank 1";
    } catch (const CommError& e) {
      failed_at = clock_type::now();
      // In one process rank 1's member is aborted too, and may close the
      // connection before rank 0's member is marked: either way the call is
      // freed by the abort, not by its deadline.
      EXPECT_TRUE(e.kind() == CommErrorKind::kBroken || e.kind() == CommErrorKind::kConnectionClosed) << e.what();
    }
    watchdog.join();
    EXPECT_TRUE(lost->broken());
    EXPECT_FALSE(other->broken());
    rank0_done.set_value();
    std::fill(x.begin(), x.end(), 1.0f);
    other->all_reduce(x.data(), x.size());
    EXPECT_EQ(x[0], 2.0f);
  });
  testing::rethrow_first(errors);
  EXPECT_EQ(aborted, 2);  // both members of {0, 1} live in this process
  report("abort_groups_with -> blocked all_reduce fails", seconds_between(aborted_at, failed_at));
  EXPECT_LT(seconds_between(aborted_at, failed_at), 1.0);
}

// A transport failure of a call calls its group's on_failure once; a trainer
// aborts the other groups of the epoch from there (abort_epoch_groups), so a
// call blocked on another thread in a group of that epoch fails within a
// second, not at its 10 s deadline, and a group of another epoch goes on.
// abort() itself calls no on_failure. Both ranks live in this process, so the
// abort also reaches rank 1's `busy`, whose closed sockets may wake rank 0's
// call before its own abort does: that call then fails in the transport, and
// its on_failure (a real transport failure) is the only other one allowed.
TEST(Abort, OnFailureLetsAFailedGroupAbortTheOtherGroupsOfItsEpoch) {
  TempStoreDir dir;
  auto store = open_store(dir.spec());
  std::mutex mutex;
  std::multiset<std::string> failed;  // the groups whose on_failure ran
  bool busy_closed_by_peer = false;
  std::promise<void> rank0_done;
  auto rank0_finished = rank0_done.get_future().share();
  clock_type::time_point called_at, busy_failed_at;
  auto errors = run_threads(2, [&](int rank) {
    const auto options = [&](const std::string& name, std::uint64_t epoch) {
      GroupOptions o = group_options(2, rank, name, epoch, 10s);
      o.on_failure = [&, name, epoch](const CommError& e) {
        {
          std::lock_guard lock(mutex);
          failed.insert(name);
        }
        abort_epoch_groups(epoch, std::string("another group of the epoch failed: ") + e.what());
      };
      return o;
    };
    auto failing = create_group(store, options("failing", 5));
    auto busy = create_group(store, options("busy", 5));
    auto later = create_group(store, options("later", 6));
    std::vector<float> x(1000, 1.0f);
    if (rank == 1) {
      failing.reset();  // closes its connections: rank 0's call fails in the transport
      rank0_finished.wait_for(30s);
      later->all_reduce(x.data(), x.size());
      return;
    }
    std::thread other([&] {  // rank 1 never calls `busy`
      std::vector<float> y(1000, 1.0f);
      try {
        busy->all_reduce(y.data(), y.size());
        ADD_FAILURE() << "busy returned without rank 1";
      } catch (const CommError& e) {
        busy_failed_at = clock_type::now();
        if (e.kind() == CommErrorKind::kConnectionClosed) {
          busy_closed_by_peer = true;  // rank 1's `busy`, aborted first
        } else {
          EXPECT_EQ(e.kind(), CommErrorKind::kBroken) << e.what();
          EXPECT_NE(std::string(e.what()).find("another group of the epoch failed"), std::string::npos) << e.what();
        }
      }
    });
    std::this_thread::sleep_for(200ms);  // `busy` is blocked by now
    called_at = clock_type::now();
    try {
      failing->all_reduce(x.data(), x.size());
      ADD_FAILURE() << "all_reduce returned without rank 1";
    } catch (const CommError& e) {
      EXPECT_NE(e.kind(), CommErrorKind::kBroken) << e.what();
    }
    other.join();
    EXPECT_TRUE(busy->broken());
    EXPECT_FALSE(later->broken());
    rank0_done.set_value();
    later->all_reduce(x.data(), x.size());
    EXPECT_EQ(x[0], 2.0f);
  });
  testing::rethrow_first(errors);
  EXPECT_EQ(failed.count("failing"), 1u);
  EXPECT_EQ(failed.count("busy"), busy_closed_by_peer ? 1u : 0u);
  EXPECT_EQ(failed.count("later"), 0u);
  report("failing call -> call blocked in another group fails", seconds_between(called_at, busy_failed_at));
  EXPECT_LT(seconds_between(called_at, busy_failed_at), 1.0);
}

// Rank 1 blocks in all_reduce on rank 0, which never calls it but aborts.
TEST(Abort, ThePeerOfAnAbortingRankFailsFast) {
  TempStoreDir dir;
  auto store = open_store(dir.spec());
  std::promise<void> rank1_done;
  auto rank1_finished = rank1_done.get_future();
  clock_type::time_point aborted_at, failed_at;
  auto errors = run_threads(2, [&](int rank) {
    auto g = create_group(store, group_options(2, rank, "abort-peer", 1, 10s));
    std::vector<float> x(1000, 1.0f);
    if (rank == 0) {
      std::this_thread::sleep_for(200ms);
      aborted_at = clock_type::now();
      std::thread([&] { g->abort("watchdog: leaving"); }).join();
      try {
        g->all_reduce(x.data(), x.size());
        ADD_FAILURE() << "aborted group still ran";
      } catch (const CommError& e) {
        EXPECT_EQ(e.kind(), CommErrorKind::kBroken) << e.what();
      }
      rank1_finished.wait_for(30s);
      return;
    }
    try {
      g->all_reduce(x.data(), x.size());
      ADD_FAILURE() << "all_reduce returned without rank 0";
    } catch (const CommError& e) {
      failed_at = clock_type::now();
      EXPECT_EQ(e.kind(), CommErrorKind::kConnectionClosed) << e.what();
    }
    rank1_done.set_value();
  });
  testing::rethrow_first(errors);
  report("abort -> the peer's all_reduce fails", seconds_between(aborted_at, failed_at));
  EXPECT_LT(seconds_between(aborted_at, failed_at), 1.0);
}

// The trainer's pattern: the call runs on the group's thread, the watchdog
// aborts from the main thread, and destroying the group drains the thread.
TEST(Abort, FreesAnAsyncCallAndTheGroupIsDestroyed) {
  TempStoreDir dir;
  auto store = open_store(dir.spec());
  std::promise<void> rank0_done;
  auto rank0_finished = rank0_done.get_future();
  clock_type::time_point aborted_at, failed_at, destroyed_at;
  auto errors = run_threads(2, [&](int rank) {
    auto g = create_group(store, group_options(2, rank, "abort-async", 1, 10s));
    if (rank == 1) {
      rank0_finished.wait_for(30s);
      return;
    }
    std::vector<double> x(1 << 16, 1.0);
    auto work = g->all_reduce_async(x.data(), x.size());
    std::this_thread::sleep_for(200ms);
    EXPECT_FALSE(work->done());
    aborted_at = clock_type::now();
    g->abort("watchdog: rank 1 is stale");
    try {
      work->wait();
      ADD_FAILURE() << "async all_reduce completed without rank 1";
    } catch (const CommError& e) {
      failed_at = clock_type::now();
      EXPECT_EQ(e.kind(), CommErrorKind::kBroken) << e.what();
    }
    g.reset();
    destroyed_at = clock_type::now();
    rank0_done.set_value();
  });
  testing::rethrow_first(errors);
  report("abort -> async all_reduce fails", seconds_between(aborted_at, failed_at));
  EXPECT_LT(seconds_between(aborted_at, failed_at), 1.0);
  EXPECT_LT(seconds_between(aborted_at, destroyed_at), 1.0);
}

// ---- creation ----

// Ranks 0 and 1 of a group of three; rank 2 never runs.
struct CreationOutcome {
  std::vector<std::exception_ptr> errors;
  double seconds = 0;  // from the start (or from the moment rank 2 is reported dead) to the last failure
};

// What tells the members to give up, `after` the start: rank 2's death
// (is_dead), or the epoch given up (abandoned).
enum class Oracle { kIsDead, kAbandoned };

CreationOutcome create_without_rank_2(const std::shared_ptr<Store>& store, const std::string& name,
                                      std::chrono::milliseconds connect_timeout,
                                      std::optional<std::chrono::milliseconds> dead_after,
                                      Oracle oracle = Oracle::kIsDead) {
  const auto start = clock_type::now();
  const auto dead_at = start + dead_after.value_or(0ms);
  std::vector<clock_type::time_point> failed(2, start);
  CreationOutcome outcome;
  outcome.errors = run_threads(2, [&](int rank) {
    auto opts = group_options(3, rank, name, 1, 10s);
    opts.connect_timeout = connect_timeout;
    if (dead_after && oracle == Oracle::kIsDead) {
      opts.is_dead = [dead_at](int r) { return r == 2 && clock_type::now() >= dead_at; };
    }
    if (dead_after && oracle == Oracle::kAbandoned) opts.abandoned = [dead_at] { return clock_type::now() >= dead_at; };
    try {
      create_group(store, opts);
    } catch (...) {
      failed[static_cast<std::size_t>(rank)] = clock_type::now();
      throw;
    }
  });
  outcome.seconds = seconds_between(dead_at, std::max(failed[0], failed[1]));
  return outcome;
}

// Every member failed with `kind`, a message holding `what` and `phase`,
// within a second of the oracle's answer.
void expect_gave_up(const CreationOutcome& outcome, CommErrorKind kind, const std::string& what,
                    const std::string& phase) {
  for (const auto& e : outcome.errors) {
    ASSERT_NE(e, nullptr) << "create_group succeeded without rank 2";
    try {
      std::rethrow_exception(e);
    } catch (const CommError& error) {
      EXPECT_EQ(error.kind(), kind) << error.what();
      if (kind == CommErrorKind::kPeerError) {
        EXPECT_EQ(error.peer(), 2) << error.what();
      }
      EXPECT_NE(std::string(error.what()).find(what), std::string::npos) << error.what();
      EXPECT_NE(std::string(error.what()).find(phase), std::string::npos) << error.what();
    }
  }
  EXPECT_LT(outcome.seconds, 1.0);
}

void expect_rank_2_named_dead(const CreationOutcome& outcome, const std::string& phase) {
  expect_gave_up(outcome, CommErrorKind::kPeerError, "rank 2 is dead", phase);
}

void expect_abandoned(const CreationOutcome& outcome, const std::string& phase) {
  expect_gave_up(outcome, CommErrorKind::kBroken, "abandoned", phase);
}

// Rank 2 never joins; is_dead says so from the start.
TEST(CreationGivesUp, WhenIsDeadReportsAMemberThatHasNotJoined) {
  TempStoreDir dir;
  auto store = open_store(dir.spec());
  const auto outcome = create_without_rank_2(store, "dead-join", 10s, 0ms);
  report("is_dead -> create_group fails (join wait)", outcome.seconds);
  expect_rank_2_named_dead(outcome, "while joining");
}

// An address no member has: 127.0.0.2 sorts after the members' 127.0.0.1, so
// each of them takes the listening side of its pair with rank 2 and waits for
// rank 2 to connect, which it never does.
std::vector<char> unreachable_mesh_record(int peers) {
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(9);
  ::inet_pton(AF_INET, "127.0.0.2", &sin.sin_addr);
  const auto address = gloo::transport::tcp::Address(reinterpret_cast<const sockaddr*>(&sin), sizeof(sin)).bytes();
  std::vector<char> record;
  for (int i = 0; i < peers; ++i) record.insert(record.end(), address.begin(), address.end());
  return record;
}

// Rank 2 published an address and joined, then died before connecting.
void publish_rank_2_that_never_connects(Store& store, const std::string& name) {
  const std::string prefix = group_prefix(1, name);
  store.set(mesh_key(prefix, 2), unreachable_mesh_record(2));
  store.append(join_list_key(prefix), join_card(group_options(3, 2, name)));
}

TEST(CreationGivesUp, WhenIsDeadReportsAMemberThatNeverConnects) {
  TempStoreDir dir;
  auto store = open_store(dir.spec());
  publish_rank_2_that_never_connects(*store, "dead-connect");
  const auto outcome = create_without_rank_2(store, "dead-connect", 10s, 300ms);
  report("is_dead -> create_group fails (blocked connect)", outcome.seconds);
  expect_rank_2_named_dead(outcome, "while connecting");
}

// Control: without is_dead the same creation waits in Gloo's connect for 5x
// the connect deadline (300 ms here), so the test above did block there.
TEST(CreationGivesUp, ControlWithoutIsDeadABlockedConnectWaitsFiveDeadlines) {
  TempStoreDir dir;
  auto store = open_store(dir.spec());
  publish_rank_2_that_never_connects(*store, "slow-connect");
  const auto outcome = create_without_rank_2(store, "slow-connect", 300ms, std::nullopt);
  report("no is_dead -> create_group fails (blocked connect, 300 ms deadline)", outcome.seconds);
  for (const auto& e : outcome.errors) EXPECT_NE(e, nullptr) << "create_group succeeded without rank 2";
  EXPECT_GT(outcome.seconds, 1.2);
}

// A member failed while the epoch's groups were being created and marked the
// epoch failed: the others give up within a poll, not at connect_timeout.
TEST(CreationGivesUp, WhenTheEpochIsAbandonedWhileJoining) {
  TempStoreDir dir;
  auto store = open_store(dir.spec());
  const auto outcome = create_without_rank_2(store, "abandoned-join", 10s, 300ms, Oracle::kAbandoned);
  report("abandoned -> create_group fails (join wait)", outcome.seconds);
  expect_abandoned(outcome, "while joining");
}

TEST(CreationGivesUp, WhenTheEpochIsAbandonedWhileConnecting) {
  TempStoreDir dir;
  auto store = open_store(dir.spec());
  publish_rank_2_that_never_connects(*store, "abandoned-connect");
  const auto outcome = create_without_rank_2(store, "abandoned-connect", 10s, 300ms, Oracle::kAbandoned);
  report("abandoned -> create_group fails (blocked connect)", outcome.seconds);
  expect_abandoned(outcome, "while connecting");
}

// Control: without an oracle the join wait lasts the whole connect deadline.
TEST(CreationGivesUp, ControlWithoutAnOracleTheJoinWaitsOutTheDeadline) {
  TempStoreDir dir;
  auto store = open_store(dir.spec());
  const auto outcome = create_without_rank_2(store, "slow-join", 1500ms, std::nullopt);
  for (const auto& e : outcome.errors) EXPECT_NE(e, nullptr) << "create_group succeeded without rank 2";
  EXPECT_GT(outcome.seconds, 1.4);
}

}  // namespace
}  // namespace ntp::comm
