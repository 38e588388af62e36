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

TEST(Faults, SlowTakesAFactorOfAtLeastOne) {
  const FaultSpec slow = parse_faults("2@3:start:SLOW=2.5")[0];
  EXPECT_EQ(slow.signal, kSlow);
  EXPECT_DOUBLE_EQ(slow.slowdown, 2.5);
  EXPECT_EQ(to_string(slow), "2@3:start:SLOW=2.5");
  EXPECT_DOUBLE_EQ(parse_faults("2@9:start:SLOW=1")[0].slowdown, 1.0);  // its speed back
  for (const char* bad : {"2@3:start:SLOW=0.5", "2@3:start:SLOW=", "2@3:start:SLOW=x", "2@3:start:SLOW=inf"}) {
    EXPECT_THROW(parse_faults(bad), std::invalid_argument) << bad;
  }
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

// The lease's timing (docs/launch.md, "Partitions"), checked at start; each
// error names the key to change.
TEST(Faults, LeaseTimingsThatCannotHoldAreRejected) {
  const auto load = [](std::vector<std::string> sets) {
    sets.push_back("elastic.recover=true");
    return load_config("", sets);
  };
  const auto rejected_for = [&](const std::vector<std::string>& sets) -> std::string {
    try {
      load(sets);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_DOUBLE_EQ(lease_seconds(load({}).deadline), 10.0);  // 2 x heartbeat_s
  EXPECT_DOUBLE_EQ(lease_seconds(load({"deadline.lease_s=7"}).deadline), 7.0);
  EXPECT_DOUBLE_EQ(heartbeat_interval_s(load({"deadline.heartbeat_s=0.1", "deadline.lease_s=0.2"}).deadline), 0.05);
  // Shorter than the heartbeat deadline.
  EXPECT_NE(rejected_for({"deadline.lease_s=4"}).find("deadline.lease_s: is 4 s, must be >= deadline.heartbeat_s"),
            std::string::npos)
      << rejected_for({"deadline.lease_s=4"});
  // Fewer than three renewals (every max(heartbeat_s / 5, 0.05 s)) per lease.
  EXPECT_NE(rejected_for({"deadline.heartbeat_s=0.1", "deadline.lease_s=0.12"}).find("deadline.lease_s"),
            std::string::npos);
  // The agreement cannot wait out a silent member's lease.
  EXPECT_NE(rejected_for({"deadline.collective_s=10", "deadline.rendezvous_s=15", "deadline.lease_s=20"})
                .find("deadline.rendezvous_s"),
            std::string::npos);
  EXPECT_EQ(rejected_for({"deadline.collective_s=10", "deadline.rendezvous_s=21", "deadline.lease_s=20"}), "accepted");
  EXPECT_NE(rejected_for({"deadline.lease_s=-1"}).find("deadline.lease_s"), std::string::npos);
  // Without in-job recovery nobody holds a lease.
  EXPECT_THROW(load_config("", {"deadline.lease_s=20"}), ConfigError);
}

TEST(Faults, DeadlinesThatContradictEachOtherAreRejected) {
  EXPECT_THROW(load_config("", {"deadline.collective_s=50", "deadline.rendezvous_s=40"}), ConfigError);
  EXPECT_NO_THROW(load_config("", {"deadline.collective_s=10", "deadline.rendezvous_s=11"}));
}

}  // namespace
}  // namespace ntp::train
