// The job plan: places, members, layouts, groups, hosts and threads built
// once from the configuration and the model's shape; the next epoch's plan
// from the current one. Every property is checked over many shapes, and each
// check is shown to fail on a deliberately wrong plan.
#include "train/job_plan.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <tuple>
#include <set>
#include <stdexcept>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "layout/errors.h"
#include "train/model_setup.h"
#include "train/pipeline_executor.h"
#include "train/pipeline_schedule.h"
#include "tests/train/replica_pipeline.h"
#include "tests/model/model_test_util.h"

namespace ntp::train {
namespace {

using Failed = std::map<ReplicaStage, std::vector<std::int64_t>>;

Config config_of(std::int64_t dp, std::int64_t tp, const std::map<std::int64_t, std::vector<std::int64_t>>& failed = {},
                 std::int64_t min_tp = 1, std::int64_t align = 1) {
  Config c;
  c.parallel.dp = dp;
  c.parallel.tp = tp;
  c.parallel.failed = failed_in_stage0(failed);
  c.parallel.min_tp = min_tp;
  c.parallel.align = align;
  c.train.global_batch = 8;
  return c;
}

JobShape shape_of(const model::GptConfig& gpt = model::testing::small_test_config()) { return {gpt, 8, 100}; }

model::GptConfig with_layers(model::GptConfig gpt, std::int64_t layers) {
  gpt.layers = layers;
  return gpt;
}

Config staged_config(std::int64_t dp, std::int64_t pp, std::int64_t tp, Failed failed = {}, std::int64_t min_tp = 1) {
  Config c = config_of(dp, tp, {}, min_tp);
  c.parallel.pp = pp;
  c.parallel.failed = std::move(failed);
  return c;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// The pipeline links of `rank` (view v): its activation comes from a rank of
// the stage before in its replica and the gradient of its output from the
// stage after; each stage's senders reach every rank of the next stage
// exactly once (each receiver names its sender among them), and the same
// backwards; equal degrees pair TP-group index j with j. "" when all hold.
template <typename Plan>
std::string check_links(const Plan& plan, int rank, const RankView& v) {
  const RankPlace& at = plan.place(rank);
  const int pp = static_cast<int>(plan.parallel().pp);
  if (v.layers != plan.stages()[static_cast<std::size_t>(at.stage)]) return fmt::format("rank {}: other blocks", rank);
  // The pipeline group: the replica's training ranks of every stage, ascending (none with one stage).
  std::vector<int> replica_ranks;
  for (int r = 0; r < plan.world_size() && pp > 1; ++r) {
    if (plan.is_member(r) && plan.place(r).replica == at.replica) replica_ranks.push_back(r);
  }
  if (v.pipeline_group != replica_ranks) return fmt::format("rank {}: its pipeline group is not its replica", rank);
  // A neighbour stage's direction: `from` names one sender there, `to` the
  // ranks this one sends to there; each must be of that stage and replica.
  const auto side = [&](int stage, int from, const std::vector<int>& to, const char* what) -> std::string {
    const bool exists = stage >= 0 && stage < pp;
    if (!exists) return from == -1 && to.empty() ? "" : fmt::format("rank {}: {} links past the pipeline's end", rank, what);
    std::vector<int> ranks = to;
    ranks.push_back(from);
    for (int r : ranks) {
      if (r < 0 || r >= plan.world_size() || plan.place(r).replica != at.replica || plan.place(r).stage != stage) {
        return fmt::format("rank {}: {} link to rank {} outside stage {} of its replica", rank, what, r, stage);
      }
    }
    return "";
  };
  if (std::string e = side(at.stage - 1, v.activation_from, v.gradient_to, "backward"); !e.empty()) return e;
  if (std::string e = side(at.stage + 1, v.gradient_from, v.activation_to, "forward"); !e.empty()) return e;
  // Each receiver's sender must list it: activation_from's activation_to holds
  // this rank, gradient_from's gradient_to too.
  const auto lists = [&](int sender, bool activation) {
    if (sender < 0) return true;
    const RankView s = plan.view(sender);
    const std::vector<int>& to = activation ? s.activation_to : s.gradient_to;
    return std::count(to.begin(), to.end(), rank) == 1;
  };
  if (!lists(v.activation_from, true)) return fmt::format("rank {}: its activation's sender does not send it", rank);
  if (!lists(v.gradient_from, false)) return fmt::format("rank {}: its gradient's sender does not send it", rank);
  // ...and every rank a sender lists names that sender back.
  for (int r : v.activation_to) {
    if (plan.view(r).activation_from != rank) return fmt::format("rank {}: sends an activation nobody awaits", rank);
  }
  for (int r : v.gradient_to) {
    if (plan.view(r).gradient_from != rank) return fmt::format("rank {}: sends a gradient nobody awaits", rank);
  }
  if (at.stage + 1 < pp) {
    const RankView next = plan.view(v.activation_to.empty() ? v.gradient_from : v.activation_to.front());
    if (next.tp_group.size() == v.tp_group.size()) {
      const auto index = [](const std::vector<int>& group, int r) { return std::find(group.begin(), group.end(), r) - group.begin(); };
      if (v.activation_to.size() != 1 || index(next.tp_group, v.activation_to[0]) != index(v.tp_group, rank)) {
        return fmt::format("rank {}: equal degrees, but not paired index for index", rank);
      }
    }
  }
  return "";
}

// Every invariant a plan keeps, checked from the outside: "" when it holds,
// else the first violation. A template so that the broken plans below
// (JobPlan itself cannot be built wrong) can show that each check fails.
template <typename Plan>
std::string check_plan(const Plan& plan) {
  const ParallelConfig& p = plan.parallel();
  std::set<std::tuple<int, int, int>> seen;
  for (int rank = 0; rank < plan.world_size(); ++rank) {
    const RankPlace& at = plan.place(rank);
    if (at.stage < 0 || at.stage >= p.pp) return fmt::format("rank {}: stage {} outside the pipeline", rank, at.stage);
    if (!seen.insert({at.replica, at.stage, at.slot}).second) return "two ranks share a place";
    if (rank > 0) {
      const RankPlace& before = plan.place(rank - 1);
      if (std::tie(before.replica, before.stage, before.slot) >= std::tie(at.replica, at.stage, at.slot)) {
        return "places are not replica-major, then stage, then slot";
      }
    }
  }
  for (int rank = 0; rank < plan.world_size(); ++rank) {
    const RankPlace& at = plan.place(rank);
    const std::vector<std::int64_t> active = p.active_slots(at.replica, at.stage);
    bool every_stage = true;
    for (std::int64_t s = 0; s < p.pp; ++s) {
      every_stage = every_stage && static_cast<std::int64_t>(p.active_slots(at.replica, s).size()) >= p.min_tp;
    }
    const bool trains = every_stage && std::binary_search(active.begin(), active.end(), at.slot);
    if (trains != plan.is_member(rank)) return fmt::format("rank {}: membership breaks the min_tp rule", rank);
    const RankView v = plan.view(rank);
    if (v.trains != trains) return fmt::format("rank {}: its view says trains = {}", rank, v.trains);
    if (!trains) continue;
    for (const model::UnitKind kind : {model::UnitKind::kHead, model::UnitKind::kNeuron, model::UnitKind::kVocab}) {
      if (v.views.of(kind).units != plan.layout(kind, at.stage).units_of(at.replica, at.slot)) {
        return fmt::format("rank {}: its view holds other units than the layout gives its slot", rank);
      }
    }
    if (v.tp_group.size() != active.size()) return fmt::format("rank {}: its TP group misses slots", rank);
    for (std::size_t i = 0; i < v.tp_group.size(); ++i) {
      const RankPlace& member = plan.place(v.tp_group[i]);
      if (member.replica != at.replica || member.stage != at.stage || member.slot != active[i]) {
        return fmt::format("rank {}: TP group member {} is not slot {} of its replica", rank, v.tp_group[i], active[i]);
      }
    }
    if (std::find(v.tp_group.begin(), v.tp_group.end(), rank) == v.tp_group.end()) return "a rank outside its TP group";
    if ((v.sync_group >= 0) != !v.dp_group.empty()) return fmt::format("rank {}: sync role without a DP group", rank);
    if (v.sync_group >= 0) {
      if (std::find(v.dp_group.begin(), v.dp_group.end(), rank) == v.dp_group.end()) return "a rank outside its DP group";
      std::set<int> replicas;
      for (int r : v.dp_group) {
        replicas.insert(plan.place(r).replica);
        if (plan.place(r).stage != at.stage) return fmt::format("rank {}: its DP group joins another stage", rank);
      }
      if (replicas.size() != v.dp_group.size()) return "a DP group holds two slots of one replica";
    }
    if (const std::string links = check_links(plan, rank, v); !links.empty()) return links;
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

TEST(JobPlan, TheFirstEpochTrainsEveryProcessAndWithoutAPipelineEveryPlaceIsStage0) {
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
  EXPECT_EQ(lost.parallel().failed, (Failed{{{1, 0}, {1}}}));
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

// ---- the pipeline axis (parallel.pp) -----------------------------------

TEST(JobPlan, EveryInvariantHoldsForManyPipelines) {
  int checked = 0;
  std::mt19937 rng(34);
  for (const model::GptConfig& base : {model::testing::small_test_config(), model::testing::llama_test_config()}) {
    for (std::int64_t layers : {4, 5, 7}) {  // 5 and 7 divide by none of pp 2, 3, 4
      const JobShape shape = shape_of(with_layers(base, layers));
      for (std::int64_t pp : {2, 3, 4}) {
        for (std::int64_t tp : {1, 2, 3}) {
          for (std::int64_t dp : {1, 2}) {
            for (int pattern = 0; pattern < 6; ++pattern) {
              // Failed slots in random stages of random replicas, each stage
              // keeping at least one slot.
              Failed failed;
              if (pattern > 0) {
                for (std::int64_t r = 0; r < dp; ++r) {
                  for (std::int64_t s = 0; s < pp; ++s) {
                    const auto lost = static_cast<std::int64_t>(rng() % static_cast<unsigned>(tp));
                    if (lost == 0) continue;
                    std::vector<std::int64_t> slots(static_cast<std::size_t>(tp));
                    std::iota(slots.begin(), slots.end(), 0);
                    std::shuffle(slots.begin(), slots.end(), rng);
                    slots.resize(static_cast<std::size_t>(lost));
                    std::sort(slots.begin(), slots.end());
                    failed[{r, s}] = slots;
                  }
                }
              }
              const JobPlan plan = JobPlan::build(staged_config(dp, pp, tp, failed), shape);
              ASSERT_EQ(check_plan(plan), "") << "layers " << layers << " pp " << pp << " tp " << tp << " dp " << dp
                                              << " pattern " << pattern;
              ASSERT_EQ(plan.pp(), pp);
              // The stages cover the blocks in order, each at least one.
              int next = 0;
              for (const model::StageRange& stage : plan.stages()) {
                ASSERT_EQ(stage.first_layer, next);
                ASSERT_GE(stage.layers(), 1);
                next = stage.end_layer;
              }
              ASSERT_EQ(next, layers);
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 2 * 3 * 3 * 3 * 2 * 6);
}

TEST(JobPlan, AStageIsItsOwnTpGroupAndPlacesRunReplicaStageSlot) {
  // dp 2 x pp 2 x tp 2, replica 1's stage 1 lost slot 0.
  const JobPlan plan = JobPlan::build(staged_config(2, 2, 2, {{{1, 1}, {0}}}),
                                      shape_of(with_layers(model::testing::small_test_config(), 4)));
  EXPECT_EQ(plan.world_size(), 7);
  EXPECT_EQ(plan.place(2), (RankPlace{.replica = 0, .slot = 0, .stage = 1}));
  EXPECT_EQ(plan.place(6), (RankPlace{.replica = 1, .slot = 1, .stage = 1}));
  EXPECT_EQ(plan.tp_group(1, 1), (std::vector<int>{6}));
  EXPECT_EQ(plan.view(4).tp_group, (std::vector<int>{4, 5}));
  // Replica 1's stage 1 at TP 1: its one rank takes the activation of index
  // 0 and sends its gradient to both ranks of stage 0.
  const RankView degraded = plan.view(6);
  EXPECT_EQ(degraded.activation_from, 4);
  EXPECT_EQ(degraded.gradient_to, (std::vector<int>{4, 5}));
  EXPECT_EQ(degraded.activation_to, (std::vector<int>{}));
  EXPECT_EQ(plan.view(5).activation_to, (std::vector<int>{}));
  EXPECT_EQ(plan.view(5).gradient_from, 6);
  EXPECT_EQ(plan.view(4).activation_to, (std::vector<int>{6}));
  // Equal degrees pair index for index.
  EXPECT_EQ(plan.view(1).activation_to, (std::vector<int>{3}));
  EXPECT_EQ(plan.view(3).gradient_to, (std::vector<int>{1}));
  // The DP group of a stage joins that stage of every replica.
  for (int rank : plan.view(2).dp_group) EXPECT_EQ(plan.place(rank).stage, 1);
  // The batch share follows the slowest stage.
  EXPECT_EQ(plan.split().active, (std::vector<std::int64_t>{2, 1}));
  // The lost slot is named with its stage; the next epoch's configuration keeps it.
  const JobPlan lost = plan.without({2});
  EXPECT_EQ(lost.parallel().failed, (Failed{{{0, 1}, {0}}, {{1, 1}, {0}}}));
  EXPECT_EQ(check_plan(lost), "");
  EXPECT_EQ(lost.with({2}).parallel(), plan.parallel());
}

TEST(JobPlan, AReplicaWithAStageBelowMinTpSitsOutInEveryStage) {
  const JobPlan plan = JobPlan::build(staged_config(2, 3, 3, {{{1, 2}, {0, 2}}}, 2),
                                      shape_of(with_layers(model::testing::small_test_config(), 5)));
  EXPECT_FALSE(plan.trains(1));
  EXPECT_EQ(plan.world_size(), 9);  // replica 0 only
  EXPECT_EQ(check_plan(plan), "");
  for (int stage = 0; stage < 3; ++stage) {
    EXPECT_TRUE(plan.layout(model::UnitKind::kHead, stage).replica(1).dropped) << stage;
    EXPECT_FALSE(plan.layout(model::UnitKind::kHead, stage).replica(0).dropped) << stage;
  }
  // A rank lost in stage 1 of a two-replica job takes only that stage's layout
  // below min_tp; replica 1 stops training and its ranks stay numbered.
  const JobPlan two = JobPlan::build(staged_config(2, 2, 2, {}, 2), shape_of(with_layers(model::testing::small_test_config(), 4)));
  const JobPlan one = two.without({6});
  EXPECT_EQ(one.members(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(check_plan(one), "");
}

TEST(JobPlan, TheStagesWeighTheLmHeadAndEveryRanksWorkAddsUpToTheModel) {
  // GPT-2's head over 50304 rows weighs several blocks: the last stage holds it and one block.
  model::GptConfig gpt2{50257, 50304, 12, 768, 12, 1024};
  Config c = staged_config(1, 4, 1);
  c.train.global_batch = 1;
  const JobPlan plan = JobPlan::build(c, {gpt2, 64, 10});
  ASSERT_EQ(plan.pp(), 4);
  double staged = 0;
  for (int rank = 0; rank < plan.world_size(); ++rank) staged += plan.work_of(rank);
  Config whole = c;
  whole.parallel.pp = 1;
  const double one = JobPlan::build(whole, {gpt2, 64, 10}).work_of(0);
  EXPECT_NEAR(staged, one, 1e-9 * one);
  // The head weighs about 5.5 blocks (50304 rows against 12 x 768 per
  // block), so the bottleneck is the last stage holding it and one block;
  // the others hold at most as much.
  EXPECT_EQ(plan.stages().back().layers(), 1);
  for (int rank = 0; rank + 1 < plan.world_size(); ++rank) {
    EXPECT_LE(plan.work_of(rank), plan.work_of(plan.world_size() - 1)) << rank;
  }
}

// The links of every replica, run as 1F1B exchanges with rendezvous sends
// (check_exchanges over ranks): a rank that sends one activation to several
// ranks of a wider next stage, or whose copy another rank sends, never waits
// forever, for every schedule length.
TEST(JobPlan, EveryReplicasPipelineLinksCompleteTheirExchanges) {
  std::mt19937 rng(341);
  int checked = 0;
  for (std::int64_t pp : {2, 3, 4}) {
    for (std::int64_t tp : {1, 2, 3, 4}) {
      for (int pattern = 0; pattern < 8; ++pattern) {
        Failed failed;
        for (std::int64_t s = 0; s < pp && pattern > 0; ++s) {
          std::vector<std::int64_t> slots(static_cast<std::size_t>(tp));
          std::iota(slots.begin(), slots.end(), 0);
          std::shuffle(slots.begin(), slots.end(), rng);
          slots.resize(rng() % static_cast<unsigned>(tp));
          std::sort(slots.begin(), slots.end());
          if (!slots.empty()) failed[{1, s}] = slots;
        }
        const JobPlan plan =
            JobPlan::build(staged_config(2, pp, tp, failed), shape_of(with_layers(model::testing::small_test_config(), 5)));
        for (int replica : {0, 1}) {
          const testing::ReplicaPipeline pipe = testing::replica_pipeline(plan, replica);
          for (int m : {1, 2, static_cast<int>(pp), static_cast<int>(2 * pp + 1)}) {
            ASSERT_NO_THROW(check_exchanges(plan_pipeline(one_f_one_b(static_cast<int>(pp), m)), pipe.links))
                << "pp " << pp << " tp " << tp << " pattern " << pattern << " replica " << replica << " m " << m;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 3 * 4 * 8 * 2 * 4);
  // Shown to fail: stage 1's rank 2 (of 2) told to take its activation from
  // stage 0's index 0, which sends it to rank 2's neighbour only.
  const JobPlan plan = JobPlan::build(staged_config(1, 2, 2, {{{0, 1}, {1}}}), shape_of(with_layers(model::testing::small_test_config(), 4)));
  testing::ReplicaPipeline pipe = testing::replica_pipeline(plan, 0);
  ASSERT_EQ(pipe.links[2].activation_from, 0);  // stage 1 at TP 1 takes index 0's copy
  ASSERT_EQ(pipe.links[1].activation_to, (std::vector<int>{}));
  pipe.links[2].activation_from = 1;
  try {
    check_exchanges(plan_pipeline(one_f_one_b(2, 3)), pipe.links);
    FAIL() << "a receiver whose sender does not send to it was not caught";
  } catch (const PipelineDeadlock& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2 (stage 1) waits"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("which rank 1 (stage 0) never posts"), std::string::npos) << e.what();
  }
}

TEST(JobPlan, MoreStagesThanBlocksAreRefusedNamingParallelPp) {
  const std::string e = error_of([] {
    JobPlan::build(staged_config(1, 3, 1), shape_of(model::testing::small_test_config()));  // 2 blocks
  });
  EXPECT_NE(e.find("parallel.pp"), std::string::npos) << e;
  EXPECT_THROW(JobPlan::build(staged_config(1, 3, 1), shape_of()), ConfigError);
}

// A plan with one thing wrong, to show that check_plan sees it.
enum class Break {
  kNone,
  kMemberBelowMinTp,
  kTpGroupOrder,
  kOtherSlotsUnits,
  kDpGroupTwice,
  kHostShifted,
  // The pipeline's breaks: what a mis-wired stage link would do.
  kActivationFromOwnStage,  // a micro-batch's activation taken from the wrong stage's rank
  kGradientNotSent,         // a rank that never sends its input's gradient back
  kActivationToTwice,       // a rank of the next stage fed twice
  kShiftedPairs,            // equal degrees paired index j with j + 1
  kDpGroupOtherStage,       // a DP group joining another stage's rank
  kOtherBlocks,             // a rank computing another stage's blocks
  kPipelineGroupShort,      // a pipeline group missing one of its replica's ranks
};

struct BrokenPlan {
  const JobPlan& plan;
  Break what;
  const ParallelConfig& parallel() const { return plan.parallel(); }
  int world_size() const { return plan.world_size(); }
  const RankPlace& place(int rank) const { return plan.place(rank); }
  const layout::JobLayout& layout(model::UnitKind kind, int stage) const { return plan.layout(kind, stage); }
  const std::vector<model::StageRange>& stages() const { return plan.stages(); }
  bool is_member(int rank) const { return what == Break::kMemberBelowMinTp ? true : plan.is_member(rank); }
  RankView view(int rank) const {
    RankView v = what == Break::kMemberBelowMinTp ? plan.view(0) : plan.view(rank);
    if (what == Break::kMemberBelowMinTp) v.place = plan.place(rank);
    if (what == Break::kTpGroupOrder && v.tp_group.size() > 1) std::swap(v.tp_group[0], v.tp_group[1]);
    if (what == Break::kOtherSlotsUnits && rank == 1) v.views.neurons.units = plan.view(0).views.neurons.units;
    if (what == Break::kDpGroupTwice && v.dp_group.size() > 1) v.dp_group[1] = v.tp_group.back() == rank ? v.tp_group.front() : v.tp_group.back();
    if (what == Break::kActivationFromOwnStage && v.activation_from >= 0) v.activation_from = v.tp_group.front();
    if (what == Break::kGradientNotSent) v.gradient_to.clear();
    if (what == Break::kActivationToTwice && !v.activation_to.empty()) v.activation_to.push_back(v.activation_to[0]);
    if (what == Break::kShiftedPairs) shift(v);
    if (what == Break::kDpGroupOtherStage && v.dp_group.size() > 1 && plan.place(rank).stage == 0) {
      v.dp_group.back() = plan.tp_group(plan.place(v.dp_group.back()).replica, 1).front();
    }
    if (what == Break::kOtherBlocks && plan.place(rank).stage == 1) v.layers = plan.stages()[0];
    if (what == Break::kPipelineGroupShort && rank == 0 && !v.pipeline_group.empty()) v.pipeline_group.pop_back();
    return v;
  }
  // Every link moved one TP-group index on (mod k): consistent on both ends,
  // but not index for index.
  void shift(RankView& v) const {
    const auto moved = [&](int r) {
      if (r < 0) return r;
      const std::vector<int> group = plan.view(r).tp_group;
      const auto i = std::find(group.begin(), group.end(), r) - group.begin();
      return group[static_cast<std::size_t>(i + 1) % group.size()];
    };
    const auto back = [&](int r) {
      if (r < 0) return r;
      const std::vector<int> group = plan.view(r).tp_group;
      const auto i = std::find(group.begin(), group.end(), r) - group.begin();
      return group[static_cast<std::size_t>(i + static_cast<long>(group.size()) - 1) % group.size()];
    };
    v.activation_from = back(v.activation_from);
    v.gradient_from = back(v.gradient_from);
    for (int& r : v.activation_to) r = moved(r);
    for (int& r : v.gradient_to) r = moved(r);
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
  // The pipeline's checks, on dp 2 x pp 3 x tp 2 with stage 1 of replica 1 at
  // TP 1 (unequal degrees on both of its links).
  const JobPlan staged = JobPlan::build(staged_config(2, 3, 2, {{{1, 1}, {0}}}), shape_of(with_layers(model::testing::small_test_config(), 5)));
  ASSERT_EQ(check_plan(BrokenPlan{staged, Break::kNone}), "");
  for (const Break b : {Break::kActivationFromOwnStage, Break::kGradientNotSent, Break::kActivationToTwice,
                        Break::kShiftedPairs, Break::kDpGroupOtherStage, Break::kOtherBlocks,
                        Break::kPipelineGroupShort}) {
    EXPECT_NE(check_plan(BrokenPlan{staged, b}), "") << static_cast<int>(b);
  }
}

}  // namespace
}  // namespace ntp::train
