// The job plan: places, members, layouts, groups, hosts and threads built
// once from the configuration and the model's shape; the next epoch's plan
// from the current one. Every property is checked over many shapes, and each
// check is shown to fail on a deliberately wrong plan.
#include "train/job_plan.h"

#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "layout/errors.h"
#include "train/model_setup.h"
#include "tests/model/model_test_util.h"

namespace ntp::train {
namespace {

Config config_of(std::int64_t dp, std::int64_t tp, std::map<std::int64_t, std::vector<std::int64_t>> failed = {},
                 std::int64_t min_tp = 1, std::int64_t align = 1) {
  Config c;
  c.parallel.dp = dp;
  c.parallel.tp = tp;
  c.parallel.failed = std::move(failed);
  c.parallel.min_tp = min_tp;
  c.parallel.align = align;
  c.train.global_batch = 8;
  return c;
}

JobShape shape_of(const model::GptConfig& gpt = model::testing::small_test_config()) { return {gpt, 8, 100}; }

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Every invariant a plan keeps, checked from the outside: "" when it holds,
// else the first violation. A template so that the broken plans below
// (JobPlan itself cannot be built wrong) can show that each check fails.
template <typename Plan>
std::string check_plan(const Plan& plan) {
  const ParallelConfig& p = plan.parallel();
  std::set<std::pair<int, int>> seen;
  for (int rank = 0; rank < plan.world_size(); ++rank) {
    const RankPlace& at = plan.place(rank);
    if (!seen.insert({at.replica, at.slot}).second) return "two ranks share a place";
    if (rank > 0) {
      const RankPlace& before = plan.place(rank - 1);
      if (std::tie(before.replica, before.slot) >= std::tie(at.replica, at.slot)) return "places are not replica-major";
    }
  }
  for (int rank = 0; rank < plan.world_size(); ++rank) {
    const RankPlace& at = plan.place(rank);
    const std::vector<std::int64_t> active = p.active_slots(at.replica);
    const bool trains = static_cast<std::int64_t>(active.size()) >= p.min_tp &&
                        std::binary_search(active.begin(), active.end(), at.slot);
    if (trains != plan.is_member(rank)) return fmt::format("rank {}: membership breaks the min_tp rule", rank);
    const RankView v = plan.view(rank);
    if (v.trains != trains) return fmt::format("rank {}: its view says trains = {}", rank, v.trains);
    if (!trains) continue;
    for (const model::UnitKind kind : {model::UnitKind::kHead, model::UnitKind::kNeuron, model::UnitKind::kVocab}) {
      if (v.views.of(kind).units != plan.layout(kind).units_of(at.replica, at.slot)) {
        return fmt::format("rank {}: its view holds other units than the layout gives its slot", rank);
      }
    }
    if (v.tp_group.size() != active.size()) return fmt::format("rank {}: its TP group misses slots", rank);
    for (std::size_t i = 0; i < v.tp_group.size(); ++i) {
      const RankPlace& member = plan.place(v.tp_group[i]);
      if (member.replica != at.replica || member.slot != active[i]) {
        return fmt::format("rank {}: TP group member {} is not slot {} of its replica", rank, v.tp_group[i], active[i]);
      }
    }
    if (std::find(v.tp_group.begin(), v.tp_group.end(), rank) == v.tp_group.end()) return "a rank outside its TP group";
    if ((v.sync_group >= 0) != !v.dp_group.empty()) return fmt::format("rank {}: sync role without a DP group", rank);
    if (v.sync_group >= 0) {
      if (std::find(v.dp_group.begin(), v.dp_group.end(), rank) == v.dp_group.end()) return "a rank outside its DP group";
      std::set<int> replicas;
      for (int r : v.dp_group) replicas.insert(plan.place(r).replica);
      if (replicas.size() != v.dp_group.size()) return "a DP group holds two slots of one replica";
    }
  }
  int covered = 0;
  for (const HostPlacement& h : plan.hosts()) {
    if (h.first_rank != covered) return "hosts' ranks are not contiguous";
    for (int r = h.first_rank; r < h.first_rank + h.ranks; ++r) {
      if (std::find(h.replicas.begin(), h.replicas.end(), plan.place(r).replica) == h.replicas.end()) {
        return fmt::format("rank {} is not on the host of its replica", r);
      }
    }
    covered += h.ranks;
  }
  if (covered != plan.world_size()) return "ranks without a host";
  return "";
}

TEST(JobPlan, EveryInvariantHoldsForManyShapes) {
  int checked = 0;
  for (const model::GptConfig& gpt : {model::testing::small_test_config(), model::testing::llama_test_config()}) {
    for (std::int64_t dp : {1, 2, 3}) {
      for (std::int64_t tp : {1, 2, 3, 4}) {
        for (std::int64_t lost = 0; lost < tp; ++lost) {
          std::map<std::int64_t, std::vector<std::int64_t>> failed;
          for (std::int64_t s = 0; s < lost; ++s) failed[dp - 1].push_back(tp - 1 - s);
          for (std::int64_t min_tp : {std::int64_t{1}, tp}) {
            if (dp == 1 && lost > 0 && min_tp > tp - lost) continue;  // nobody trains
            const JobPlan plan = JobPlan::build(config_of(dp, tp, failed, min_tp), shape_of(gpt));
            ASSERT_EQ(check_plan(plan), "") << "dp " << dp << " tp " << tp << " lost " << lost << " min_tp " << min_tp;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 60);
}

TEST(JobPlan, TheFirstEpochTrainsEveryProcessAndPlacesCarryNoStageYet) {
  const JobPlan plan = JobPlan::build(config_of(2, 4, {{0, {2}}}), shape_of());
  EXPECT_EQ(plan.epoch(), 0u);
  EXPECT_EQ(plan.world_size(), 7);
  EXPECT_EQ(plan.members(), (std::vector<int>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(plan.place(2), (RankPlace{0, 3, 0}));
  EXPECT_EQ(plan.rank_of({1, 0}), 3);
  EXPECT_THROW(plan.rank_of({0, 2}), std::logic_error);
  EXPECT_NE(error_of([&] { plan.place(7); }).find("rank 7"), std::string::npos);
}

TEST(JobPlan, AReplicaBelowMinTpHasNoProcesses) {
  const JobPlan plan = JobPlan::build(config_of(2, 4, {{1, {0, 1}}}, 3), shape_of());
  EXPECT_EQ(plan.world_size(), 4);
  EXPECT_TRUE(plan.trains(0));
  EXPECT_FALSE(plan.trains(1));
  EXPECT_EQ(plan.split().active, (std::vector<std::int64_t>{4, 2}));
}

TEST(JobPlan, WithoutAndWithGiveTheNextEpochsAndKeepRankNumbers) {
  const JobPlan first = JobPlan::build(config_of(2, 4), shape_of());
  const JobPlan lost = first.without({5});
  EXPECT_EQ(lost.epoch(), 1u);
  EXPECT_EQ(lost.world_size(), 8);  // rank 5 keeps its number
  EXPECT_EQ(lost.members(), (std::vector<int>{0, 1, 2, 3, 4, 6, 7}));
  EXPECT_EQ(lost.parallel().failed, (std::map<std::int64_t, std::vector<std::int64_t>>{{1, {1}}}));
  EXPECT_EQ(check_plan(lost), "");
  EXPECT_FALSE(lost.view(5).trains);
  EXPECT_EQ(lost.view(4).tp_group, (std::vector<int>{4, 6, 7}));
  const JobPlan back = lost.with({5});
  EXPECT_EQ(back.epoch(), 2u);
  EXPECT_EQ(back.parallel(), first.parallel());
  EXPECT_EQ(back.members(), first.members());
  // Below min_tp the whole replica leaves the members, its ranks keep their numbers.
  Config c = config_of(2, 4);
  c.parallel.min_tp = 3;
  const JobPlan two_lost = JobPlan::build(c, shape_of()).without({1, 2});
  EXPECT_EQ(two_lost.members(), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(check_plan(two_lost), "");
}

TEST(JobPlan, EveryRankTakesTheCoresOfItsHost) {
  Config c = config_of(4, 2);
  c.model.threads = 0;
  const JobPlan one_host = JobPlan::build(c, shape_of(), 1);
  const JobPlan two_hosts = JobPlan::build(c, shape_of(), 2);
  EXPECT_EQ(one_host.host_of(5).ranks, 8);
  EXPECT_EQ(two_hosts.host_of(5).ranks, 4);
  EXPECT_EQ(two_hosts.threads(5).threads, thread_setup(c.model, 4).threads);
  c.model.threads = 3;
  EXPECT_EQ(JobPlan::build(c, shape_of(), 2).threads(0).threads, 3);
}

TEST(JobPlan, HostsHoldWholeReplicasAndContiguousRanks) {
  const JobPlan plan = JobPlan::build(config_of(4, 4, {{1, {2}}}), shape_of(), 2);
  ASSERT_EQ(plan.hosts().size(), 2u);
  EXPECT_EQ(plan.hosts()[0].replicas, (std::vector<int>{0, 1}));
  EXPECT_EQ(plan.hosts()[0].ranks, 7);  // replica 1 lost slot 2
  EXPECT_EQ(plan.hosts()[1].first_rank, 7);
  EXPECT_EQ(plan.hosts()[1].ranks, 8);
  EXPECT_EQ(describe_placement(plan.hosts()), "node 0: replicas 0,1 (ranks 0-6); node 1: replicas 2,3 (ranks 7-14)");
  for (int nnodes : {1, 2, 3, 4}) {
    for (std::int64_t per_host : {1, 2, 3}) {
      EXPECT_EQ(check_plan(JobPlan::build(config_of(nnodes * per_host, 3, {{0, {1}}}), shape_of(), nnodes)), "");
    }
  }
}

TEST(JobPlan, BadInputIsRefusedNamingTheKeyOrFlag) {
  const std::string split = error_of([] { JobPlan::build(config_of(3, 4), shape_of(), 2); });
  EXPECT_NE(split.find("--nnodes 2"), std::string::npos) << split;
  EXPECT_NE(split.find("parallel.dp = 3"), std::string::npos) << split;
  EXPECT_NE(error_of([] { JobPlan::build(config_of(2, 4, {{1, {0, 1, 2}}}, 2), shape_of(), 2); }).find("no training rank"),
            std::string::npos);
  EXPECT_NE(error_of([] { JobPlan::build(config_of(2, 4), shape_of(), 0); }).find("--nnodes 0"), std::string::npos);
  const std::string batch = error_of([] { JobPlan::build(config_of(1, 1), {model::testing::small_test_config(), 8, 7}); });
  EXPECT_NE(batch.find("train.global_batch"), std::string::npos) << batch;
  // 11 GPT-2 heads over 12 slots.
  const std::string heads = error_of([] { JobPlan::build(config_of(1, 12), shape_of()); });
  EXPECT_NE(heads.find("parallel.tp"), std::string::npos) << heads;
  EXPECT_NE(heads.find("heads"), std::string::npos) << heads;
}

TEST(JobPlan, TheScheduleAndSplitAreTheConfigs) {
  Config c = config_of(2, 2, {{1, {1}}});
  c.train.seed = 7;
  const JobPlan plan = JobPlan::build(c, shape_of());
  const SampleSchedule expected(100, 8, c.data.order, 7);
  for (std::int64_t s : {0, 5, 13, 40}) EXPECT_EQ(plan.schedule().step_samples(s), expected.step_samples(s));
  EXPECT_EQ(plan.split().active, (std::vector<std::int64_t>{2, 1}));
  EXPECT_EQ(plan.split().global_batch, 8);
}

TEST(JobPlan, ATransitionFromTwoPlansMovesOnlyTheLostSlotsUnits) {
  // Replica 1 runs at 3 already: replica 0 losing a slot keeps K = 3, so
  // replica 1's layout does not change and nothing moves to it.
  const JobPlan first = JobPlan::build(config_of(2, 4, {{1, {3}}}), shape_of());
  const JobPlan next = first.without({3});
  const KindPlans plans = transition(first, next, {});
  for (const layout::TransitionPlan* p : {&plans.heads, &plans.neurons, &plans.vocab}) {
    EXPECT_TRUE(p->recoverable());
    for (const layout::Move& move : p->moves) EXPECT_EQ(move.to.replica, 0) << "replica 1's layout did not change";
  }
  // Replica 0 lost whole and replica 1's slots stale: nobody may serve.
  const std::string lost = error_of([&] {
    transition(first, first.without({0, 1, 2, 3}), {{1, 0}, {1, 1}, {1, 2}, {1, 3}});
  });
  EXPECT_NE(lost.find("no surviving holder"), std::string::npos) << lost;
}

// A plan with one thing wrong, to show that check_plan sees it.
enum class Break { kNone, kMemberBelowMinTp, kTpGroupOrder, kOtherSlotsUnits, kDpGroupTwice, kHostShifted };

struct BrokenPlan {
  const JobPlan& plan;
  Break what;
  const ParallelConfig& parallel() const { return plan.parallel(); }
  int world_size() const { return plan.world_size(); }
  const RankPlace& place(int rank) const { return plan.place(rank); }
  const layout::JobLayout& layout(model::UnitKind kind) const { return plan.layout(kind); }
  bool is_member(int rank) const { return what == Break::kMemberBelowMinTp ? true : plan.is_member(rank); }
  RankView view(int rank) const {
    RankView v = what == Break::kMemberBelowMinTp ? plan.view(0) : plan.view(rank);
    if (what == Break::kMemberBelowMinTp) v.place = plan.place(rank);
    if (what == Break::kTpGroupOrder && v.tp_group.size() > 1) std::swap(v.tp_group[0], v.tp_group[1]);
    if (what == Break::kOtherSlotsUnits && rank == 1) v.views.neurons.units = plan.view(0).views.neurons.units;
    if (what == Break::kDpGroupTwice && v.dp_group.size() > 1) v.dp_group[1] = v.tp_group.back() == rank ? v.tp_group.front() : v.tp_group.back();
    return v;
  }
  std::vector<HostPlacement> hosts() const {
    std::vector<HostPlacement> h = plan.hosts();
    if (what == Break::kHostShifted) ++h.back().first_rank;
    return h;
  }
};

TEST(JobPlan, TheCheckerRejectsEveryBrokenPlan) {
  const JobPlan plan = JobPlan::build(config_of(2, 4, {{1, {0, 1}}}, 3), shape_of(), 1);
  const JobPlan degraded = JobPlan::build(config_of(2, 4), shape_of(), 2).without({5});
  ASSERT_EQ(check_plan(BrokenPlan{degraded, Break::kNone}), "");
  EXPECT_NE(check_plan(BrokenPlan{plan.without({0}), Break::kMemberBelowMinTp}), "");
  EXPECT_NE(check_plan(BrokenPlan{degraded, Break::kTpGroupOrder}), "");
  EXPECT_NE(check_plan(BrokenPlan{degraded, Break::kOtherSlotsUnits}), "");
  EXPECT_NE(check_plan(BrokenPlan{degraded, Break::kDpGroupTwice}), "");
  EXPECT_NE(check_plan(BrokenPlan{degraded, Break::kHostShifted}), "");
}

}  // namespace
}  // namespace ntp::train
