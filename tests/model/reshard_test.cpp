#include "model/reshard.h"

#include <optional>

#include <gtest/gtest.h>

#include "model_test_util.h"
#include "tests/comm/thread_ranks.h"

namespace ntp::model {
namespace {

// A rank moves from one random unit assignment to another (as after TP 4 -> 3);
// units it keeps are copied locally, the others come from `fetch`, here served
// from a full copy of the state. The result must equal a direct scatter.
// `stage`: the model holds only those blocks (a pipeline stage) and keeps them.
void check_reshard(const GptConfig& c, const Shard& from, const Shard& to, std::optional<StageRange> stage = {}) {
  const ParameterLayout full(c, Shard::full(c));
  std::vector<float> values(static_cast<std::size_t>(full.size()));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f;
  const auto offset_of = [](StateKind s) { return s == StateKind::kParams ? 0.0f : s == StateKind::kAdamM ? 1.0f : 2.0f; };

  comm::testing::run_group(1, "tp", [&](comm::Group& group) {
    tensor::Context ctx({1});
    Model m = stage ? Model(c, from, ctx, &group, *stage) : Model(c, from, ctx, &group);
    const std::string first_block = "h" + std::to_string(m.layout().stage().first_layer) + ".qkv_w";
    AdamW opt({}, m.layout());
    scatter_from_full(full, values, m.layout(), m.params());
    for (std::size_t i = 0; i < opt.m().size(); ++i) {  // moments = params + 1 and + 2
      opt.m().data()[i] = m.params()[i] + 1.0f;
      opt.v().data()[i] = m.params()[i] + 2.0f;
    }
    layout::IntervalSet fetched_heads;
    reshard(m, &opt, to, [&](StateKind state, const TensorSpec& spec,
                                   const layout::IntervalSet& units, float* dst) {
      const TensorSpec& f = full[spec.name];
      copy_units(f, values, units, dst);
      for (std::int64_t i = 0; i < units.size() * spec.unit_size; ++i) dst[i] += offset_of(state);
      if (spec.name == first_block && state == StateKind::kParams) fetched_heads.add(units);
    });
    EXPECT_EQ(m.layout().shard(), to);
    EXPECT_EQ(m.layout().stage(), stage.value_or(StageRange::whole(c)));
    EXPECT_EQ(fetched_heads, to.heads.subtract(from.heads));  // only what is missing
    std::vector<float> want(static_cast<std::size_t>(m.layout().size()));
    scatter_from_full(full, values, m.layout(), want);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), m.params().begin()));
    for (std::size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(opt.m().data()[i], want[i] + 1.0f) << i;
      ASSERT_EQ(opt.v().data()[i], want[i] + 2.0f) << i;
    }
    for (float g : m.grads()) ASSERT_EQ(g, 0.0f);
  });
}

TEST(Reshard, MovesParametersAndMomentsToTheNewUnits) {
  const GptConfig c = testing::small_test_config();
  check_reshard(c, testing::random_shards(c, 4, 21)[1], testing::random_shards(c, 3, 22)[1]);
}

// A stage's model keeps its blocks: its new layout is the same blocks over
// the new units (before, the new layout was the whole model's).
TEST(Reshard, AStageKeepsItsBlocks) {
  const GptConfig c = testing::small_test_config();
  check_reshard(c, testing::random_shards(c, 4, 24)[2], testing::random_shards(c, 3, 25)[0], StageRange{1, 2});
  check_reshard(c, testing::random_shards(c, 2, 26)[1], testing::random_shards(c, 3, 27)[2], StageRange{0, 1});
}

// A rank may hold no head, neuron or vocabulary row at all (more TP slots
// than units of a kind): resharding into and out of that state is exact too.
TEST(Reshard, ToAndFromARankThatHoldsNoUnits) {
  const GptConfig c = testing::small_test_config();
  const Shard nothing{layout::IntervalSet{}, layout::IntervalSet{}, layout::IntervalSet{}};
  const Shard some = testing::random_shards(c, 3, 23)[0];
  check_reshard(c, some, nothing);
  check_reshard(c, nothing, some);
}

TEST(Reshard, PartialShardWithoutGroupIsRejected) {
  const GptConfig c = testing::small_test_config();
  tensor::Context ctx({1});
  Model m(c, Shard::full(c), ctx);
  EXPECT_THROW(reshard(m, nullptr, testing::random_shards(c, 2, 1)[0], nullptr),
               std::invalid_argument);
  EXPECT_THROW(Model(c, testing::random_shards(c, 2, 1)[0], ctx), std::invalid_argument);
}

}  // namespace
}  // namespace ntp::model
