// What `ntp train` says after SIGINT/SIGTERM: the checkpoint of the
// interrupted step when its save completed, else the newest complete one,
// and never a checkpoint that is not there (a writer lost during the
// interrupt's save leaves only a .partial folder).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "elastic/train_job.h"
#include "tests/support/test_dir.h"

namespace ntp::elastic {
namespace {

namespace fs = std::filesystem;

class InterruptionTest : public ::testing::Test {
 protected:
  void SetUp() override { fs::create_directories(run_ / "checkpoints"); }
  void TearDown() override { fs::remove_all(run_); }
  // A folder under checkpoints/, complete (with a manifest) or not.
  void folder(const std::string& name, bool complete) {
    fs::create_directories(run_ / "checkpoints" / name);
    if (complete) std::ofstream(run_ / "checkpoints" / name / "manifest.json") << "{}\n";
  }
  const fs::path run_ = ntp::test::fresh_test_dir("ntp_interruption");
};

TEST_F(InterruptionTest, NamesTheInterruptedStepsCheckpointWhenItCompleted) {
  folder("step-2", true);
  folder("step-4", true);
  const Interruption left = interruption(run_, 4);
  ASSERT_TRUE(left.checkpoint.has_value());
  EXPECT_EQ(*left.checkpoint, run_ / "checkpoints" / "step-4");
  EXPECT_NE(left.message.find("interrupted after 4 steps; checkpoint " + (run_ / "checkpoints" / "step-4").string()),
            std::string::npos)
      << left.message;
  EXPECT_NE(left.message.find("ntp train --resume " + run_.string()), std::string::npos) << left.message;
}

TEST_F(InterruptionTest, AnIncompleteSaveNamesTheNewestCompleteCheckpoint) {
  folder("step-2", true);
  folder("step-4.partial-e0", false);
  const Interruption left = interruption(run_, 4);
  ASSERT_TRUE(left.checkpoint.has_value());
  EXPECT_EQ(*left.checkpoint, run_ / "checkpoints" / "step-2");
  EXPECT_NE(left.message.find("the checkpoint of step 4 did not complete"), std::string::npos) << left.message;
  EXPECT_NE(left.message.find("the newest is " + (run_ / "checkpoints" / "step-2").string()), std::string::npos)
      << left.message;
  EXPECT_EQ(left.message.find("step-4"), std::string::npos) << left.message;
}

TEST_F(InterruptionTest, WithNoCompleteCheckpointThereIsNothingToResume) {
  folder("step-4.partial-e0", false);
  folder("step-4", false);  // a folder without a manifest is not a checkpoint
  const Interruption left = interruption(run_, 4);
  EXPECT_FALSE(left.checkpoint.has_value());
  EXPECT_NE(left.message.find("no earlier one to resume from"), std::string::npos) << left.message;
  EXPECT_EQ(left.message.find("--resume"), std::string::npos) << left.message;
}

}  // namespace
}  // namespace ntp::elastic
