// The flags of a multi-host `ntp train` that it refuses before anything
// starts (the placement itself: tests/train/job_plan_test.cpp).

#include <algorithm>
#include <stdexcept>

#include <gtest/gtest.h>

#include "elastic/train_job.h"
#include "train/ntp_trainer.h"

namespace ntp::elastic {
namespace {

TEST(NodeOptions, InconsistentFlagsAreRefusedNamingTheFlag) {
  const auto message = [](NodeOptions node) {
    try {
      validate(node);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(message({}), "");
  EXPECT_EQ(message({2, 1, "redis://h:1?job=abc", ""}), "");
  EXPECT_NE(message({2, 0, "", ""}).find("--store redis://"), std::string::npos);
  EXPECT_NE(message({2, 2, "redis://h:1", ""}).find("--node-rank 2"), std::string::npos);
  EXPECT_NE(message({0, 0, "", ""}).find("--nnodes 0"), std::string::npos);
  EXPECT_NE(message({1, 0, "file:/tmp/x", ""}).find("--store 'file:/tmp/x'"), std::string::npos);
  EXPECT_NE(message({2, 1, "redis://h:1", ""}).find("node 1 must name the job"), std::string::npos);
}

}  // namespace
}  // namespace ntp::elastic
