// Executing a transition plan over real Gloo groups (one thread per surviving
// rank): after the move, every rank holds exactly the parameters and AdamW
// moments of its new shard, as a direct scatter of the full state would give.
#include "train/state_move.h"

#include <gtest/gtest.h>

#include "tests/comm/thread_ranks.h"
#include "tests/model/model_test_util.h"
#include "train/ntp_trainer.h"

namespace ntp::train {
namespace {

model::Shard shard_of(const ParallelConfig& p, const model::GptConfig& c, layout::SlotRef slot) {
  const auto units = [&](model::UnitKind kind, std::int64_t n) {
    return layout::plan_job(job_config(p, kind, n)).slot_view(slot.replica, slot.slot).units;
  };
  return {units(model::UnitKind::kHead, c.heads), units(model::UnitKind::kNeuron, c.ffn()),
          units(model::UnitKind::kVocab, c.padded_vocab)};
}

// Forwards to a real group, except that every float message this rank
// receives in an exchange gets one bit flipped after it arrived, as a faulty
// link or buffer would do.
class CorruptingGroup : public comm::Group {
 public:
  explicit CorruptingGroup(comm::Group& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::uint64_t epoch() const override { return inner_.epoch(); }
  const std::string& name() const override { return inner_.name(); }
  void all_reduce(float* data, std::size_t count, comm::ReduceOp op) override { inner_.all_reduce(data, count, op); }
  void all_reduce(double* data, std::size_t count, comm::ReduceOp op) override { inner_.all_reduce(data, count, op); }
  void exchange(const std::vector<comm::P2POp>& ops) override {
    inner_.exchange(ops);
    for (const comm::P2POp& op : ops) {
      if (op.kind != comm::P2POp::Kind::kRecv || op.buffer.type != comm::DataType::kFloat32) continue;
      if (op.buffer.count > 0) static_cast<unsigned char*>(op.buffer.data)[op.buffer.bytes() - 1] ^= 1u;
    }
  }

 private:
  comm::Group& inner_;
};

// dp 2 x tp `tp`; global rank `dead` dies. Survivors run the move. With
// `corrupt`, every message arrives with one bit flipped: each rank that
// receives must refuse the move, naming what arrived corrupted. With
// `sparse`, the group connects only its ring and the pairs of move_links.
// With `refresh`, every survivor but group rank 0 starts with wrong
// replicated tensors (parameters and moments) and takes group rank 0's, as a
// stale rank is rolled forward.
void check_move(std::int64_t tp, int dead, bool corrupt = false, bool sparse = false, bool refresh = false) {
  const model::GptConfig c = model::testing::small_test_config();
  ParallelConfig before;
  before.dp = 2;
  before.tp = tp;
  Config config;
  config.parallel = before;
  config.train.global_batch = 1;
  const std::vector<RankPlace> places = JobPlan::build(config, {c, 8, 8}).places();
  ParallelConfig after = before;
  after.failed[{places[static_cast<std::size_t>(dead)].replica, 0}].push_back(places[static_cast<std::size_t>(dead)].slot);
  KindPlans plans;
  const auto plan = [&](model::UnitKind kind, std::int64_t n) {
    return layout::plan_transition(layout::plan_job(job_config(before, kind, n)),
                                   layout::plan_job(job_config(after, kind, n)));
  };
  plans = {plan(model::UnitKind::kHead, c.heads), plan(model::UnitKind::kNeuron, c.ffn()),
           plan(model::UnitKind::kVocab, c.padded_vocab)};
  std::vector<int> survivors;
  for (int r = 0; r < static_cast<int>(places.size()); ++r) {
    if (r != dead) survivors.push_back(r);
  }
  const model::ParameterLayout full(c, model::Shard::full(c));
  std::vector<float> values(static_cast<std::size_t>(full.size()));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.25f;

  const auto group_rank_of = [&](layout::SlotRef s) {
    int global = 0;
    while (!(places[static_cast<std::size_t>(global)] == RankPlace{s.replica, s.slot})) ++global;
    return static_cast<int>(std::find(survivors.begin(), survivors.end(), global) - survivors.begin());
  };
  comm::testing::TempStoreDir dir;
  const auto store = comm::open_store(dir.spec());
  const int size = static_cast<int>(survivors.size());
  comm::testing::rethrow_first(comm::testing::run_threads(size, [&](int group_rank) {
    comm::GroupOptions options = comm::testing::group_options(size, group_rank, "recover");
    if (sparse) {
      options.sparse = true;
      options.links = move_links(plans, group_rank_of);
    }
    const auto connected = comm::create_group(store, options);
    comm::Group& group = *connected;
    const RankPlace me = places[static_cast<std::size_t>(survivors[static_cast<std::size_t>(group.rank())])];
    const layout::SlotRef slot{me.replica, me.slot};
    tensor::Context ctx({1});
    model::Model m(c, shard_of(before, c, slot), ctx, &group);
    model::AdamW opt({}, m.layout());
    model::scatter_from_full(full, values, m.layout(), m.params());
    for (std::size_t i = 0; i < opt.m().size(); ++i) {
      opt.m().data()[i] = m.params()[i] + 1.0f;
      opt.v().data()[i] = m.params()[i] + 2.0f;
    }
    StateMoveRank rank{slot, slot, group_rank_of, false, std::nullopt, {}};
    if (refresh && group.rank() == 0) {
      for (int r = 1; r < size; ++r) rank.replicated_to.push_back(r);
    }
    if (refresh && group.rank() != 0) {
      rank.replicated_from = 0;
      for (const model::TensorSpec& spec : m.layout().tensors()) {
        if (spec.kind != model::UnitKind::kReplicated) continue;
        for (std::int64_t i = spec.offset; i < spec.offset + spec.count; ++i) {
          for (float* state : {m.params().data(), opt.m().data(), opt.v().data()}) state[i] = -7.0f;
        }
      }
    }
    const model::Shard next = shard_of(after, c, slot);
    if (corrupt) {
      CorruptingGroup bad(group);
      bool receives = refresh && group.rank() != 0;
      for (const layout::TransitionPlan* p : {&plans.heads, &plans.neurons, &plans.vocab}) {
        for (const layout::Move& move : p->moves) receives = receives || move.to == slot;
      }
      try {
        move_state(m, opt, next, plans, rank, bad);
        EXPECT_FALSE(receives) << "replica " << me.replica << " slot " << me.slot << " took corrupted state";
      } catch (const std::runtime_error& e) {
        EXPECT_TRUE(receives);
        EXPECT_NE(std::string(e.what()).find("arrived corrupted (checksum)"), std::string::npos) << e.what();
      }
      return;
    }
    const StateMoveStats stats = move_state(m, opt, next, plans, rank, group);
    EXPECT_EQ(m.layout().shard(), next);
    std::vector<float> want(static_cast<std::size_t>(m.layout().size()));
    model::scatter_from_full(full, values, m.layout(), want);
    for (std::size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(m.params()[i], want[i]) << "replica " << me.replica << " slot " << me.slot << " element " << i;
      ASSERT_EQ(opt.m().data()[i], want[i] + 1.0f) << i;
      ASSERT_EQ(opt.v().data()[i], want[i] + 2.0f) << i;
    }
    // Only units new to the slot arrive; a rank of the degraded replica receives.
    const model::Shard old = shard_of(before, c, slot);
    const std::int64_t fresh = next.heads.subtract(old.heads).size() +
                               next.neurons.subtract(old.neurons).size() +
                               next.vocab.subtract(old.vocab).size();
    EXPECT_EQ(stats.units_in, fresh);
  }));
}

TEST(StateMove, Tp2ReplicaLosesSlot1) { check_move(2, 1); }
TEST(StateMove, Tp4ReplicaLosesSlot0AndKShrinksEverywhere) { check_move(4, 0); }
TEST(StateMove, AFlippedBitInAnyMessageIsRefusedByItsReceiver) { check_move(4, 0, true); }
// dp 2 x tp 8: 15 survivors, whose ring connects 8 of the 14 others.
TEST(StateMove, ASparseGroupWithTheMoveLinksCarriesTheMove) { check_move(8, 3, false, true); }
TEST(StateMove, StaleRanksTakeTheReplicatedTensorsOfTheirSender) { check_move(2, 1, false, false, true); }
TEST(StateMove, AFlippedBitInTheReplicatedTensorsIsRefused) { check_move(2, 1, true, false, true); }

// move_links: each (sender, receiver) of the plans once, in exchange-group ranks.
TEST(StateMove, MoveLinksNameEachTradingPairOnce) {
  KindPlans plans;
  plans.heads.moves = {{{0, 1}, {1, 0}, layout::IntervalSet{{0, 2}}}, {{0, 1}, {1, 0}, layout::IntervalSet{{4, 6}}}};
  plans.neurons.moves = {{{0, 2}, {1, 1}, layout::IntervalSet{{0, 8}}}};
  const auto rank_of = [](layout::SlotRef s) { return s.replica * 3 + s.slot; };
  EXPECT_EQ(move_links(plans, rank_of), (std::vector<std::pair<int, int>>{{1, 3}, {2, 4}}));
}

}  // namespace
}  // namespace ntp::train
