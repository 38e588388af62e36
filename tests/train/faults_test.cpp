// Parsing of test.failures and the draw of test.chaos.
#include "train/faults.h"

#include <signal.h>

#include <set>

#include <gtest/gtest.h>

#include "train/config.h"

namespace ntp::train {
namespace {

TEST(Faults, ParsesEveryFieldAndDefaultsToKill) {
  const std::vector<FaultSpec> f = parse_faults(" 3@5:commit:STOP; 1@0:forward ;");
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0], (FaultSpec{3, 5, "commit", SIGSTOP}));
  EXPECT_EQ(f[1], (FaultSpec{1, 0, "forward", SIGKILL}));
  EXPECT_EQ(to_string(f[0]), "3@5:commit:STOP");
  EXPECT_EQ(parse_faults("2@1:sync:HANG")[0].signal, kHang);
  EXPECT_EQ(parse_faults("2@1:forward:MUTE")[0].signal, kMute);
  EXPECT_EQ(parse_faults("2@1:backward:SEGV")[0].signal, SIGSEGV);
  EXPECT_EQ(to_string(parse_faults("2@1:backward:SEGV")[0]), "2@1:backward:SEGV");
  EXPECT_EQ(to_string(parse_faults("2@1:forward:MUTE")[0]), "2@1:forward:MUTE");
  EXPECT_EQ(parse_faults("2@1:commit:LAG")[0].signal, kLag);
  EXPECT_THROW(parse_faults("2@1:sync:LAG"), std::invalid_argument);  // LAG only at commit
  EXPECT_TRUE(parse_faults("").empty());
}

TEST(Faults, RejectsMalformedEntriesNamingThem) {
  for (const char* bad : {"3", "3@x:forward", "3@1:lunch", "3@1:forward:TERM", "-1@2:sync", "1@2"}) {
    try {
      parse_faults(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
}

TEST(Faults, ChaosIsReproducibleAndHitsEachRankAtMostOnce) {
  const auto a = chaos_faults(5, 7, 8, 10);
  EXPECT_EQ(a, chaos_faults(5, 7, 8, 10));
  EXPECT_NE(a, chaos_faults(5, 8, 8, 10));
  ASSERT_EQ(a.size(), 5u);
  std::set<int> ranks;
  for (const FaultSpec& f : a) {
    EXPECT_TRUE(ranks.insert(f.rank).second);
    EXPECT_GE(f.step, 1);
    EXPECT_LT(f.step, 10);
  }
  EXPECT_EQ(chaos_faults(20, 1, 4, 10).size(), 4u);
}

TEST(Faults, TheConfigurationRejectsAFailureOfARankOrStepTheJobDoesNotHave) {
  const auto load = [](const std::string& failures) {
    return load_config("", {"parallel.dp=2", "parallel.tp=2", "train.steps=5", "test.failures=\"" + failures + "\""});
  };
  EXPECT_NO_THROW(load("3@4:sync"));
  EXPECT_THROW(load("4@1:sync"), ConfigError);
  EXPECT_THROW(load("1@5:sync"), ConfigError);
  EXPECT_THROW(load("1@2:nowhere"), ConfigError);
  EXPECT_THROW(load_config("", {"parallel.dp=2", "parallel.tp=2", "test.kill_rank=9", "test.kill_at_step=1"}),
               ConfigError);
}

TEST(Faults, DeadlinesThatContradictEachOtherAreRejected) {
  EXPECT_THROW(load_config("", {"deadline.collective_s=50", "deadline.rendezvous_s=40"}), ConfigError);
  EXPECT_NO_THROW(load_config("", {"deadline.collective_s=10", "deadline.rendezvous_s=11"}));
}

}  // namespace
}  // namespace ntp::train
