// DeadMarks: one batched store read answers every question of a process
// within max_age, and marks set or erased are seen once it passes.
#include "elastic/dead_marks.h"

#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "comm/counting_store.h"
#include "elastic/membership.h"
#include "tests/support/test_dir.h"

namespace ntp::elastic {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class DeadMarksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::fresh_test_dir("ntp_dead_marks");
    fs::create_directories(dir_);
    store_ = std::make_shared<comm::CountingStore>(comm::open_store("file:" + dir_.string()));
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
  std::shared_ptr<comm::CountingStore> store_;
};

// The cost the class exists for: a group creation's polls ask about every
// member, four groups at once; a process pays one read per max_age.
TEST_F(DeadMarksTest, QuestionsWithinMaxAgeShareOneRead) {
  store_->create(dead_key(7), comm::to_bytes("fenced"));
  const auto before = store_->counts().operations;
  DeadMarks marks(store_, 144, 10s);
  std::vector<std::thread> groups;
  for (int g = 0; g < 4; ++g) {
    groups.emplace_back([&] {
      for (int poll = 0; poll < 10; ++poll) {
        for (int r = 0; r < 144; ++r) EXPECT_EQ(marks.is_dead(r), r == 7) << r;
      }
    });
  }
  for (auto& t : groups) t.join();
  EXPECT_EQ(store_->counts().operations - before, 1u);  // 5,760 questions
}

TEST_F(DeadMarksTest, AMarkSetOrErasedIsSeenOnceMaxAgePasses) {
  DeadMarks marks(store_, 4, 50ms);
  EXPECT_FALSE(marks.is_dead(2));
  store_->create(dead_key(2), comm::to_bytes("exited"));
  std::this_thread::sleep_for(60ms);
  EXPECT_TRUE(marks.is_dead(2));
  store_->erase(dead_key(2));  // a repaired rank rejoins under its number
  std::this_thread::sleep_for(60ms);
  EXPECT_FALSE(marks.is_dead(2));
}

// The broken variant of the cache: with a long max_age a fresh mark is not
// seen, so the test above does measure the refresh.
TEST_F(DeadMarksTest, AMarkSetWithinMaxAgeIsNotSeenYet) {
  DeadMarks marks(store_, 4, 10s);
  EXPECT_FALSE(marks.is_dead(1));
  store_->create(dead_key(1), comm::to_bytes("exited"));
  EXPECT_FALSE(marks.is_dead(1));
}

TEST_F(DeadMarksTest, AFailedEpochIsSeenForThatEpochOnlyAndInTheSameRead) {
  DeadMarks marks(store_, 4, 10s);
  store_->create(failed_key(3), comm::to_bytes("1"));
  const auto before = store_->counts().operations;
  EXPECT_TRUE(marks.epoch_failed(3));
  EXPECT_FALSE(marks.is_dead(1));  // from the same read
  EXPECT_EQ(store_->counts().operations - before, 1u);
  EXPECT_FALSE(marks.epoch_failed(4));  // another epoch's mark: read now
  EXPECT_EQ(store_->counts().operations - before, 2u);
  store_->create(failed_key(4), comm::to_bytes("2"));
  EXPECT_FALSE(marks.epoch_failed(4));  // within max_age
}

TEST_F(DeadMarksTest, ARankOutsideTheWorldIsAnError) {
  DeadMarks marks(store_, 4, 50ms);
  EXPECT_THROW(marks.is_dead(4), std::out_of_range);
  EXPECT_THROW(marks.is_dead(-1), std::out_of_range);
}

}  // namespace
}  // namespace ntp::elastic
