#include "model/parameters.h"

#include <gtest/gtest.h>

#include "model/init.h"
#include "model_test_util.h"

namespace ntp::model {
namespace {

using layout::IntervalSet;

TEST(ParameterLayout, UnitMetadataAndSizes) {
  const GptConfig c = testing::small_test_config();
  const Shard s{IntervalSet{{1, 3}, {7, 8}}, IntervalSet{{0, 5}, {100, 110}}, IntervalSet{{3, 9}}};
  const ParameterLayout lay(c, s);
  const TensorSpec& qkv = lay["h1.qkv_w"];
  EXPECT_EQ(qkv.kind, UnitKind::kHead);
  EXPECT_EQ(qkv.unit_size, 3 * 4 * 44);
  EXPECT_EQ(qkv.count, 3 * qkv.unit_size);
  EXPECT_EQ(qkv.units, s.heads);
  EXPECT_EQ(lay["h0.proj_wt"].unit_size, 4 * 44);
  EXPECT_EQ(lay["h0.fc1_b"].unit_size, 1);
  EXPECT_EQ(lay["h0.fc2_wt"].count, 15 * 44);
  EXPECT_EQ(lay["wte"].count, 6 * 44);
  EXPECT_EQ(lay["wpe"].kind, UnitKind::kReplicated);
  EXPECT_TRUE(lay["h0.fc1_w"].weight_decay);
  EXPECT_FALSE(lay["h0.fc1_b"].weight_decay);
  EXPECT_FALSE(lay["lnf_w"].weight_decay);
  std::int64_t next = 0;
  for (const TensorSpec& t : lay.tensors()) {  // contiguous, in order
    EXPECT_EQ(t.offset, next) << t.name;
    next += t.count;
  }
  EXPECT_EQ(next, lay.size());
  EXPECT_EQ(ParameterLayout(c, Shard::full(c)).size(), parameter_count(c));
  EXPECT_THROW(lay["nope"], std::out_of_range);
}

TEST(ParameterLayout, PresetsHaveTheExpectedSizes) {
  EXPECT_EQ(parameter_count(preset("gpt2")), 124475904);  // llm.c's count with Vp = 50304
  EXPECT_THROW(preset("huge"), std::invalid_argument);
  EXPECT_THROW(ParameterLayout(testing::small_test_config(),
                               Shard{IntervalSet{{0, 12}}, {}, {}}),
               std::invalid_argument);
}

TEST(ParameterLayout, InitIsIndependentOfTheShard) {
  const GptConfig c = testing::small_test_config();
  const ParameterLayout full(c, Shard::full(c));
  std::vector<float> full_values(static_cast<std::size_t>(full.size()));
  init_parameters(full, full_values, 7);
  for (const Shard& s : testing::random_shards(c, 3, 5)) {
    const ParameterLayout lay(c, s);
    std::vector<float> direct(static_cast<std::size_t>(lay.size()));
    std::vector<float> scattered(direct.size());
    init_parameters(lay, direct, 7);
    scatter_from_full(full, full_values, lay, scattered);
    EXPECT_EQ(direct, scattered);
  }
}

TEST(ParameterLayout, ScatterThenGatherRebuildsTheFullModel) {
  const GptConfig c = testing::small_test_config();
  const ParameterLayout full(c, Shard::full(c));
  std::vector<float> values(static_cast<std::size_t>(full.size()));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  std::vector<float> rebuilt(values.size(), -1.0f);
  int r = 0;
  for (const Shard& s : testing::random_shards(c, 4, 9)) {
    const ParameterLayout lay(c, s);
    std::vector<float> shard(static_cast<std::size_t>(lay.size()));
    scatter_from_full(full, values, lay, shard);
    // Unit-major: unit u of qkv_w sits at its offset in the shard's set.
    const TensorSpec& q = lay["h0.qkv_w"];
    if (!q.units.empty()) {
      const layout::Unit u = q.units.unit_at(0);
      EXPECT_EQ(shard[static_cast<std::size_t>(q.offset)],
                values[static_cast<std::size_t>(full["h0.qkv_w"].offset + u * q.unit_size)]);
    }
    gather_into_full(lay, shard, full, rebuilt, r++ == 0);
  }
  EXPECT_EQ(rebuilt, values);
}

}  // namespace
}  // namespace ntp::model
