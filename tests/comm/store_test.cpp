// Store::create is a compare-and-set: of many threads and processes racing to
// create the same keys, exactly one wins each key and every loser reads the
// winner's value — with the file store and with a real redis-server. A create
// that checks and then sets fails the same check.
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <thread>

#include "comm/child_process.h"
#include "comm/error.h"
#include "tests/comm/create_race.h"
#include "tests/comm/drill.h"
#include "tests/comm/redis_server.h"
#include "tests/comm/thread_ranks.h"

namespace ntp::comm {
namespace {

using namespace std::chrono_literals;

void expect_create_sets_only_a_missing_key(Store& store) {
  EXPECT_TRUE(store.create("k", to_bytes("first")));
  EXPECT_FALSE(store.create("k", to_bytes("second")));
  EXPECT_EQ(to_text(*store.try_get("k")), "first");
  store.set("k", to_bytes("third"));  // set still overwrites
  EXPECT_FALSE(store.create("k", to_bytes("fourth")));
  EXPECT_EQ(to_text(*store.try_get("k")), "third");
  store.erase("k");
  EXPECT_TRUE(store.create("k", std::vector<char>{'a', '\0', 'b'}));
  EXPECT_EQ(*store.try_get("k"), (std::vector<char>{'a', '\0', 'b'}));
}

TEST(StoreCreate, FileStoreSetsOnlyAMissingKeyAndLeavesNoTemporaryFiles) {
  testing::TempStoreDir dir;
  auto store = open_store(dir.spec());
  expect_create_sets_only_a_missing_key(*store);
  std::vector<std::string> files;
  for (const auto& f : std::filesystem::directory_iterator(dir.path())) files.push_back(f.path().filename());
  EXPECT_EQ(files, std::vector<std::string>{"k"});
}

TEST(StoreCreate, RedisSetsOnlyAMissingKeyPerNamespace) {
  if (!testing::RedisServer::available()) GTEST_SKIP() << "redis-server is not installed";
  testing::RedisServer redis;
  auto a = open_store(redis.spec("job-a"));
  auto b = open_store(redis.spec("job-b"));
  expect_create_sets_only_a_missing_key(*a);
  EXPECT_TRUE(b->create("k", to_bytes("b")));  // another namespace's key
  EXPECT_EQ(to_text(*a->try_get("k")), std::string("a\0b", 3));
}

// A lease: set_expiring's key is there until its ttl runs out, renewing it
// keeps it, and the store drops it by itself once renewals stop.
void expect_leases_expire_unless_renewed(Store& store) {
  store.set_expiring("lease", to_bytes("a"), 400ms);
  EXPECT_EQ(to_text(*store.try_get("lease")), "a");
  for (int i = 0; i < 8; ++i) {  // 800 ms of renewals, twice the ttl
    std::this_thread::sleep_for(100ms);
    store.set_expiring("lease", to_bytes("b"), 400ms);
  }
  EXPECT_EQ(to_text(*store.try_get("lease")), "b");
  EXPECT_EQ(store.get_many({"lease", "none"})[0].has_value(), true);
  std::this_thread::sleep_for(700ms);
  EXPECT_FALSE(store.try_get("lease").has_value()) << store.describe() << ": the lease outlived its ttl";
  EXPECT_FALSE(store.get_many({"lease"})[0].has_value());
  // Renewed after it lapsed: held again; erase and erase_prefix take it away.
  store.set_expiring("lease", to_bytes("c"), 10s);
  EXPECT_TRUE(store.try_get("lease").has_value());
  store.erase("lease");
  EXPECT_FALSE(store.try_get("lease").has_value());
  store.set_expiring("ntp/lease/3", to_bytes("d"), 10s);
  store.erase_prefix("ntp/lease/");
  EXPECT_FALSE(store.try_get("ntp/lease/3").has_value());
  EXPECT_THROW(store.set_expiring("lease", to_bytes("e"), 0ms), CommError);
}

TEST(StoreLease, FileStoreDropsAKeyOnceItsTtlRunsOut) {
  testing::TempStoreDir dir;
  auto store = open_store(dir.spec());
  expect_leases_expire_unless_renewed(*store);
}

TEST(StoreLease, RedisDropsAKeyOnceItsTtlRunsOut) {
  if (!testing::RedisServer::available()) GTEST_SKIP() << "redis-server is not installed";
  testing::RedisServer redis;
  auto store = open_store(redis.spec("lease"));
  expect_leases_expire_unless_renewed(*store);
}

// kProcesses comm_peer processes and this process race with kRaceThreads
// threads each on kRaceKeys keys, all starting at one wall-clock instant.
void race_threads_and_processes(const std::string& spec) {
  constexpr int kProcesses = 3;
  auto store = open_store(spec);
  testing::TempStoreDir logs;
  const std::string name = "create-" + std::to_string(::getpid());
  auto peers = testing::spawn_peers("create", spec, kProcesses, name, 10000ms, logs.path());
  std::vector<std::string> ready;
  for (int r = 0; r < kProcesses; ++r) ready.push_back("test/ready/" + std::to_string(r));
  store->wait(ready, 30s);
  const auto start = std::chrono::system_clock::now() + 200ms;
  const auto start_ms = std::chrono::duration_cast<std::chrono::milliseconds>(start.time_since_epoch()).count();
  store->set("test/go", to_bytes(std::to_string(start_ms)));
  auto outcome = testing::race_create(*store, "test", testing::kRaceThreads, testing::kRaceKeys,
                                      std::chrono::system_clock::time_point(std::chrono::milliseconds(start_ms)));
  for (int r = 0; r < kProcesses; ++r) {
    const auto status = peers[static_cast<std::size_t>(r)].wait_for(60s);
    ASSERT_TRUE(status.has_value()) << "process " << r << " still running";
    ASSERT_EQ(describe_wait_status(*status), "exit 0") << testing::log_of(logs.path(), name, r);
    testing::merge(outcome, testing::decode(to_text(store->get("test/create/" + std::to_string(r), 10s))));
  }
  ASSERT_EQ(outcome.size(), static_cast<std::size_t>(testing::kRaceKeys));
  const auto problems = testing::race_problems(*store, outcome);
  for (const auto& p : problems) ADD_FAILURE() << p;
  std::map<std::string, int> won_by;  // "test", "p0", ...: how the keys were split
  for (const auto& o : outcome) {
    for (const auto& w : o.winners) ++won_by[w.substr(0, w.find('/'))];
  }
  std::cout << "[ create race ] " << spec << ", keys won by:";
  for (const auto& [racer, n] : won_by) std::cout << " " << racer << "=" << n;
  std::cout << std::endl;
}

TEST(StoreCreate, ThreadsAndProcessesRaceOnTheFileStore) {
  testing::TempStoreDir dir;
  race_threads_and_processes(dir.spec());
}

TEST(StoreCreate, ThreadsAndProcessesRaceOnRedis) {
  if (!testing::RedisServer::available()) GTEST_SKIP() << "redis-server is not installed";
  testing::RedisServer redis;
  race_threads_and_processes(redis.spec("race"));
}

// A create that checks for the key and then sets it: two racers can both see
// it missing and both "win".
class CheckThenSetStore : public Store {
 public:
  explicit CheckThenSetStore(std::shared_ptr<Store> inner) : inner_(std::move(inner)) {}
  void set(const std::string& key, const std::vector<char>& value) override { inner_->set(key, value); }
  bool create(const std::string& key, const std::vector<char>& value) override {
    if (inner_->try_get(key)) return false;
    std::this_thread::sleep_for(1ms);  // the window a real race may hit
    inner_->set(key, value);
    return true;
  }
  std::optional<std::vector<char>> try_get(const std::string& key) override { return inner_->try_get(key); }
  void set_expiring(const std::string& key, const std::vector<char>& value, std::chrono::milliseconds ttl) override {
    inner_->set_expiring(key, value, ttl);
  }
  void erase(const std::string& key) override { inner_->erase(key); }
  void erase_prefix(const std::string& prefix) override { inner_->erase_prefix(prefix); }
  std::string describe() const override { return "check-then-set over " + inner_->describe(); }

 private:
  std::shared_ptr<Store> inner_;
};

TEST(StoreCreate, ACheckThenSetCreateFailsTheRaceCheck) {
  testing::TempStoreDir dir;
  CheckThenSetStore racy(open_store(dir.spec()));
  const auto outcome = testing::race_create(racy, "test", testing::kRaceThreads, 20);
  EXPECT_FALSE(testing::race_problems(racy, outcome).empty());
}

}  // namespace
}  // namespace ntp::comm
