// The step's test hooks: the environment is read once, at construction; a
// spec that does not parse is refused naming its variable; without the test
// switch nothing sleeps; a mutation reaches only the rank that carries it.
#include "train/step_hooks.h"

#include <cstdlib>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace ntp::train {
namespace {

constexpr const char* kVariables[] = {"NTP_TEST_MUTATIONS", "NTP_TEST_SLOW_COMPUTE", "NTP_TEST_SLOW_UPDATE"};

// Sets the test variables for one test (unset where nullopt) and puts the
// environment back afterwards.
class Env {
 public:
  explicit Env(const std::map<std::string, std::optional<std::string>>& values) {
    for (const char* name : kVariables) {
      const char* old = std::getenv(name);
      saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
      ::unsetenv(name);
    }
    set(values);
  }
  ~Env() { set({saved_.begin(), saved_.end()}); }
  Env(const Env&) = delete;
  Env& operator=(const Env&) = delete;

  static void set(const std::map<std::string, std::optional<std::string>>& values) {
    for (const auto& [name, value] : values) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TestConfig mutation(const std::string& name, std::int64_t rank) {
  TestConfig test;
  test.mutation = name;
  test.mutation_rank = rank;
  return test;
}

// A speed-up nobody may ask for: there is no delay to divide.
double never_asked() {
  ADD_FAILURE() << "speedup asked without a delay";
  return 1.0;
}

TEST(StepHooks, TheEnvironmentIsReadOnceAtConstruction) {
  Env env({{"NTP_TEST_MUTATIONS", "1"}, {"NTP_TEST_SLOW_COMPUTE", "0.5:1:3"}, {"NTP_TEST_SLOW_UPDATE", "1:0.25"}});
  const StepHooks slow(TestConfig{}, 1);
  const StepHooks other(TestConfig{}, 0);
  // Changed, malformed and switched off afterwards: the hooks keep what they read.
  Env::set({{"NTP_TEST_MUTATIONS", std::nullopt}, {"NTP_TEST_SLOW_COMPUTE", "x"}, {"NTP_TEST_SLOW_UPDATE", "y"}});
  EXPECT_DOUBLE_EQ(slow.compute_delay_s(2, 1.0), 2 * 0.5 * 3);  // RANK's FACTOR x SECONDS per sample
  EXPECT_DOUBLE_EQ(slow.compute_delay_s(2, 1.5), 2 * 0.5 * 3 / 1.5);
  EXPECT_DOUBLE_EQ(slow.update_delay_s(), 0.25);
  EXPECT_DOUBLE_EQ(other.compute_delay_s(2, 1.0), 2 * 0.5);  // every rank SECONDS per sample
  EXPECT_DOUBLE_EQ(other.update_delay_s(), 0.0);             // only RANK lags in its update
  // And the sleeps use them: a short one, with the speed-up asked for.
  const StepHooks brief = [] {
    Env short_env({{"NTP_TEST_MUTATIONS", "1"}, {"NTP_TEST_SLOW_COMPUTE", "0.001:0:1"}});
    return StepHooks(TestConfig{}, 0);
  }();
  int asked = 0;
  brief.slow_compute(1, [&] { return ++asked, 1.0; });
  EXPECT_EQ(asked, 1);
}

TEST(StepHooks, AMalformedSpecIsRefusedAtConstructionNamingTheVariable) {
  const auto message = [](const std::string& compute, const std::string& update) {
    Env env({{"NTP_TEST_MUTATIONS", "1"}, {"NTP_TEST_SLOW_COMPUTE", compute}, {"NTP_TEST_SLOW_UPDATE", update}});
    try {
      StepHooks hooks(TestConfig{}, 0);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message("0.5", "0:1"), "NTP_TEST_SLOW_COMPUTE = \"0.5\": expected SECONDS:RANK:FACTOR");
  EXPECT_EQ(message("0.5:0:2", "fast"), "NTP_TEST_SLOW_UPDATE = \"fast\": expected RANK:SECONDS");
  EXPECT_EQ(message("0.5:0:2", "0:1"), "no error");
}

TEST(StepHooks, WithoutTheTestSwitchNothingSleepsAndNothingIsParsed) {
  for (const std::optional<std::string>& allowed : {std::optional<std::string>(), std::optional<std::string>("0")}) {
    // Specs that would slow every rank down, or not even parse: ignored.
    for (const std::string& spec : {std::string("5:0:2"), std::string("garbage")}) {
      Env env({{"NTP_TEST_MUTATIONS", allowed}, {"NTP_TEST_SLOW_COMPUTE", spec}, {"NTP_TEST_SLOW_UPDATE", spec}});
      const StepHooks hooks(TestConfig{}, 0);
      EXPECT_EQ(hooks.compute_delay_s(4, 1.0), 0.0);
      EXPECT_EQ(hooks.update_delay_s(), 0.0);
      hooks.slow_compute(4, never_asked);
      hooks.slow_update();
    }
  }
  Env none({});
  const StepHooks hooks(TestConfig{}, 0);
  EXPECT_EQ(hooks.compute_delay_s(4, 1.0), 0.0);
  EXPECT_EQ(hooks.update_delay_s(), 0.0);
  hooks.slow_compute(4, never_asked);
  EXPECT_EQ(StepHooks().compute_delay_s(4, 1.0), 0.0);  // the hooks of no configuration
}

TEST(StepHooks, AMutationReachesOnlyItsRank) {
  Env env({});
  const StepHooks carrier(mutation("sample_twice", 1), 1);
  const StepHooks bystander(mutation("sample_twice", 1), 0);
  EXPECT_EQ(carrier.mutation(), Mutation::kSampleTwice);
  EXPECT_EQ(bystander.mutation(), Mutation::kNone);
  const std::vector<std::int64_t> samples = {7, 8, 9};
  std::vector<std::int64_t> v = samples;
  bystander.mutate_samples(1, 0, v);
  EXPECT_EQ(v, samples);
  carrier.mutate_samples(1, 0, v);
  EXPECT_EQ(v, (std::vector<std::int64_t>{7, 7, 9}));
  v = samples;
  carrier.mutate_samples(2, 0, v);  // only step 1
  carrier.mutate_samples(1, 1, v);  // only replica 0
  EXPECT_EQ(v, samples);
  const StepHooks skipper(mutation("sample_skipped", -1), 3);  // -1: every rank
  skipper.mutate_samples(1, 0, v);
  EXPECT_EQ(v, (std::vector<std::int64_t>{7, 8}));

  EXPECT_EQ(StepHooks(mutation("update_x1.01", 2), 2).lr_factor(), 1.01);
  EXPECT_EQ(StepHooks(mutation("update_x1.01", 2), 0).lr_factor(), 1.0);
  EXPECT_EQ(StepHooks(mutation("update_x1.03", 2), 2).lr_factor(), 1.03);
  EXPECT_EQ(StepHooks(mutation("local_loss_scale", 0), 0).loss_scale_samples(16, 5), 5);
  EXPECT_EQ(StepHooks(mutation("local_loss_scale", 0), 1).loss_scale_samples(16, 5), 16);
  EXPECT_EQ(StepHooks(mutation("ln_frozen", -1), 4).mutation(), Mutation::kLnFrozen);
  EXPECT_TRUE(StepHooks(TestConfig{}, 2, 2).mispairs());
  EXPECT_FALSE(StepHooks(TestConfig{}, 1, 2).mispairs());
  EXPECT_FALSE(StepHooks(TestConfig{}, 1).mispairs());
}

TEST(StepHooks, AFaultPointSeesEveryStepAndPhaseItIsCalledWith) {
  StepHooks hooks;
  hooks.fault(0, StepPhase::kStart);  // none set: nothing happens
  std::vector<std::pair<std::int64_t, StepPhase>> seen;
  hooks.set_fault_point([&](std::int64_t s, StepPhase phase) { seen.emplace_back(s, phase); });
  hooks.fault(3, StepPhase::kCommit);
  hooks.fault(4, StepPhase::kCheckpoint);
  EXPECT_EQ(seen, (std::vector<std::pair<std::int64_t, StepPhase>>{{3, StepPhase::kCommit},
                                                                  {4, StepPhase::kCheckpoint}}));
  EXPECT_STREQ(to_string(StepPhase::kOptimizer), "optimizer");
}

}  // namespace
}  // namespace ntp::train
