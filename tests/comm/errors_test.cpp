// Bad input and dead/hung peers with ranks as threads: every failure becomes a
// CommError of the right kind, naming group and rank, within the deadline.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <thread>

#include "tests/comm/redis_server.h"
#include "tests/comm/thread_ranks.h"

namespace ntp::comm {
namespace {

using namespace std::chrono_literals;
using testing::group_options;
using testing::run_threads;
using testing::TempStoreDir;
using clock_type = std::chrono::steady_clock;

CommError error_of(const std::exception_ptr& e) {
  try {
    if (e) std::rethrow_exception(e);
  } catch (const CommError& error) {
    return error;
  } catch (const std::exception& other) {
    ADD_FAILURE() << "not a CommError: " << other.what();
  }
  ADD_FAILURE() << "no error raised";
  return CommError({});
}

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

TEST(Errors, MismatchedCountsNameTheRankAndKeepTheGroup) {
  TempStoreDir dir;
  auto store = open_store(dir.spec());
  auto errors = run_threads(3, [&](int rank) {
    auto g = create_group(store, group_options(3, rank, "tp/r0"));
    std::vector<float> data(rank == 2 ? 7 : 5, 1.0f);
    try {
      g->all_reduce(data.data(), data.size());
      ADD_FAILURE() << "rank " << rank << " did not raise";
    } catch (const CommError& e) {
      EXPECT_EQ(e.kind(), CommErrorKind::kBadInput);
      EXPECT_EQ(e.peer(), 2);
      EXPECT_EQ(e.group(), "tp/r0");
      EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
    }
    // Caught before data moved: the group still works.
    std::vector<float> ok(5, 1.0f);
    g->all_reduce(ok.data(), ok.size());
    EXPECT_EQ(ok[4], 3.0f);
  });
  testing::rethrow_first(errors);
}

// The descriptor is exchanged for the first call of a shape; the debug
// setting keeps it on every call, so a call that differs after its shape was
// agreed is still named.
TEST(Errors, CheckEveryCallNamesAMismatchAfterAnAgreedShape) {
  TempStoreDir dir;
  auto store = open_store(dir.spec());
  auto errors = run_threads(3, [&](int rank) {
    auto opts = group_options(3, rank, "tp/r1");
    opts.check_every_call = true;
    auto g = create_group(store, opts);
    std::vector<float> agreed(5, 1.0f);
    g->all_reduce(agreed.data(), agreed.size());
    std::vector<float> data(rank == 2 ? 7 : 5, 1.0f);
    g->all_reduce(data.data(), data.size());
  });
  for (const auto& e : errors) {
    EXPECT_EQ(error_of(e).kind(), CommErrorKind::kBadInput);
    EXPECT_EQ(error_of(e).peer(), 2);
  }
}

TEST(Errors, InvalidLocalArgumentsFailOnEveryRank) {
  TempStoreDir dir;
  auto store = open_store(dir.spec());
  auto errors = run_threads(3, [&](int rank) {
    auto g = create_group(store, group_options(3, rank, "ag"));
    std::vector<double> in(4, 1.0), out(rank == 1 ? 11 : 12);
    g->all_gather(in, out);
  });
  for (int r = 0; r < 3; ++r) {
    CommError e = error_of(errors[static_cast<std::size_t>(r)]);
    EXPECT_EQ(e.kind(), CommErrorKind::kBadInput) << e.what();
    EXPECT_EQ(e.peer(), r == 1 ? -1 : 1) << e.what();
  }
}

TEST(Errors, AllToAllVCountsThatDoNotPairUp) {
  TempStoreDir dir;
  auto store = open_store(dir.spec());
  auto errors = run_threads(2, [&](int rank) {
    auto g = create_group(store, group_options(2, rank, "a2a"));
    std::vector<std::size_t> send = {1, 2}, recv = {1, rank == 1 ? 3u : 2u};
    std::vector<float> in(3), out(rank == 1 ? 4 : 3);
    g->all_to_all_v(in, send, out, recv);
  });
  for (const auto& e : errors) EXPECT_EQ(error_of(e).kind(), CommErrorKind::kBadInput);
}

TEST(Errors, MembershipDisagreementIsNamed) {
  TempStoreDir dir;
  auto store = open_store(dir.spec());
  auto errors = run_threads(3, [&](int rank) {
    auto opts = group_options(3, rank, "dp", 1, 3000ms);
    if (rank == 2) opts.ranks = {0, 2};
    create_group(store, opts);
  });
  EXPECT_EQ(error_of(errors[0]).kind(), CommErrorKind::kBadInput);
  EXPECT_EQ(error_of(errors[0]).peer(), 2);
  EXPECT_EQ(error_of(errors[2]).kind(), CommErrorKind::kBadInput);
}

TEST(Errors, BadOptionsAreRejectedAtOnce) {
  TempStoreDir dir;
  auto store = open_store(dir.spec());
  auto expect_bad = [&](GroupOptions opts, const std::string& needle) {
    try {
      create_group(store, opts);
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const CommError& e) {
      EXPECT_EQ(e.kind(), CommErrorKind::kBadInput);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto opts = group_options(2, 9, "g");
  expect_bad(opts, "global rank 9 is not a member");
  opts = group_options(4, 0, "g");
  opts.world_size = 3;
  expect_bad(opts, "member rank 3 is outside the world of 3");
  opts = group_options(2, 0, "g");
  opts.ranks = {0, 0};
  expect_bad(opts, "listed twice");
  opts = group_options(2, 0, "");
  expect_bad(opts, "name is empty");
  opts = group_options(2, 0, "g");
  opts.backend = Backend::kNccl;
  if (!have_nccl()) expect_bad(opts, "NCCL");
}

TEST(Errors, MissingRankTimesOutNamingIt) {
  TempStoreDir dir;
  auto store = open_store(dir.spec());
  const auto start = clock_type::now();
  auto errors = run_threads(2, [&](int rank) { create_group(store, group_options(3, rank, "g", 1, 1000ms)); });
  const double elapsed = seconds_since(start);
  for (const auto& e : errors) {
    CommError error = error_of(e);
    EXPECT_EQ(error.kind(), CommErrorKind::kTimeout);
    EXPECT_EQ(error.peer(), 2);
    EXPECT_NE(std::string(error.what()).find("rank(s) 2 did not join"), std::string::npos) << error.what();
  }
  EXPECT_LT(elapsed, 2.0 * 1.0 + 1.0);
}

TEST(Errors, HungPeerTimesOutAndBreaksTheGroup) {
  TempStoreDir dir;
  auto store = open_store(dir.spec());
  std::vector<double> detect(3, 0);
  auto errors = run_threads(3, [&](int rank) {
    auto g = create_group(store, group_options(3, rank, "hang", 1, 1000ms));
    std::vector<float> data(1000, 1.0f);
    g->all_reduce(data.data(), data.size());
    if (rank == 2) std::this_thread::sleep_for(2500ms);  // hangs past the deadline
    const auto start = clock_type::now();
    try {
      g->all_reduce(data.data(), data.size());
    } catch (const CommError&) {
      detect[static_cast<std::size_t>(rank)] = seconds_since(start);
      EXPECT_TRUE(g->broken());
      try {
        g->all_reduce(data.data(), data.size());
        ADD_FAILURE() << "rank " << rank << ": a broken group ran another all_reduce";
      } catch (const CommError& again) {
        EXPECT_EQ(again.kind(), CommErrorKind::kBroken);
      }
      throw;
    }
  });
  for (int r = 0; r < 2; ++r) {
    CommError e = error_of(errors[static_cast<std::size_t>(r)]);
    EXPECT_TRUE(e.kind() == CommErrorKind::kTimeout || e.kind() == CommErrorKind::kConnectionClosed) << e.what();
    EXPECT_EQ(e.group(), "hang");
    EXPECT_EQ(e.epoch(), 1u);
    EXPECT_LT(detect[static_cast<std::size_t>(r)], 2.0) << "rank " << r << " detected after the 2x deadline";
  }
  // The late rank finds its peers gone.
  EXPECT_NE(errors[2], nullptr);
  EXPECT_LT(detect[2], 2.0);
}

TEST(Errors, AbortFromAnotherThreadBreaksTheGroup) {
  testing::run_group(2, "abort", [](Group& g) {
    std::vector<float> x(10, 1.0f);
    g.all_reduce(x.data(), x.size());
    if (g.rank() == 0) std::thread([&] { g.abort("heartbeat: rank 1 is stale"); }).join();
    if (g.rank() == 0) {
      try {
        g.all_reduce(x.data(), x.size());
        ADD_FAILURE() << "aborted group still ran";
      } catch (const CommError& e) {
        EXPECT_EQ(e.kind(), CommErrorKind::kBroken);
        EXPECT_NE(std::string(e.what()).find("heartbeat: rank 1 is stale"), std::string::npos) << e.what();
      }
    }
  });
}

TEST(Errors, UnreachableOrWrongStore) {
  const auto start = clock_type::now();
  const std::string spec = "redis://127.0.0.1:" + std::to_string(testing::free_loopback_port());
  try {
    open_store(spec);
    ADD_FAILURE() << "connected to a closed port";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), CommErrorKind::kBadInput);
    EXPECT_NE(std::string(e.what()).find(spec), std::string::npos) << e.what();
  }
  EXPECT_LT(seconds_since(start), 3.5);
  EXPECT_THROW(open_store("etcd://host:1"), CommError);
  EXPECT_THROW(open_store("redis://host:notaport"), CommError);
  EXPECT_THROW(open_store("/proc/ntp-cannot-create-here"), CommError);
}

TEST(Errors, StoreWaitNamesMissingKeys) {
  TempStoreDir dir;
  auto store = open_store(dir.spec());
  store->set("present", to_bytes("x"));
  try {
    store->wait({"present", "absent/key"}, 100ms);
    ADD_FAILURE();
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), CommErrorKind::kTimeout);
    EXPECT_NE(std::string(e.what()).find("absent/key"), std::string::npos);
    EXPECT_EQ(std::string(e.what()).find("present"), std::string::npos);
  }
}

}  // namespace
}  // namespace ntp::comm

namespace ntp::comm {
namespace {

// Epoch e+1 groups of the same name on a subset of ranks work while the
// epoch-e groups still exist, and every key they write is under ntp/e2/.
TEST(Epochs, NextEpochOnSubsetSharesNothingWithThePrevious) {
  testing::TempStoreDir dir;
  auto store = open_store(dir.spec());
  std::vector<std::unique_ptr<Group>> old_groups(3);
  testing::rethrow_first(testing::run_threads(3, [&](int rank) {
    old_groups[static_cast<std::size_t>(rank)] = create_group(store, testing::group_options(3, rank, "dp", 1));
  }));
  std::set<std::string> before;
  for (const auto& f : std::filesystem::directory_iterator(dir.path())) before.insert(f.path().filename());
  testing::rethrow_first(testing::run_threads(2, [&](int i) {
    auto opts = testing::group_options(3, i == 0 ? 0 : 2, "dp", 2);
    opts.ranks = {0, 2};
    auto g = create_group(store, opts);
    std::vector<double> x(10, 1.0);
    g->all_reduce(x.data(), x.size());
    EXPECT_EQ(x[0], 2.0);
  }));
  for (const auto& f : std::filesystem::directory_iterator(dir.path())) {
    const std::string name = f.path().filename();
    if (before.count(name) == 0) {
      EXPECT_EQ(name.rfind("ntp%2Fgroups%2Fe2%2Fdp%2F", 0), 0u) << name;
    }
  }
}

}  // namespace
}  // namespace ntp::comm
