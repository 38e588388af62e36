// Pipeline stages: the layer split, what each stage's layout holds, and that
// stages chained by hand (each stage's output the next one's input, then the
// gradients back the other way) compute the whole model's loss and gradients
// bit for bit, at TP 1 and TP 2 (ranks as threads with Gloo groups).
#include "model/stage.h"

#include <gtest/gtest.h>

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <set>

#include "model/init.h"
#include "model/model.h"
#include "model/parameters.h"
#include "model_test_util.h"
#include "tensor/gpu.h"
#include "tests/comm/thread_ranks.h"

namespace ntp::model {
namespace {

// ---- split_layers ----------------------------------------------------------

TEST(SplitLayers, CoversEveryLayerContiguouslyWithSizesWithinOne) {
  for (int layers = 1; layers <= 48; ++layers) {
    for (int pp = 1; pp <= layers; ++pp) {
      const std::vector<StageRange> stages = split_layers(layers, pp);
      ASSERT_EQ(stages.size(), static_cast<std::size_t>(pp));
      int next = 0, smallest = layers, largest = 0;
      for (const StageRange& s : stages) {
        ASSERT_EQ(s.first_layer, next) << layers << " layers, pp " << pp;
        ASSERT_GE(s.layers(), 1) << layers << " layers, pp " << pp;
        smallest = std::min(smallest, s.layers());
        largest = std::max(largest, s.layers());
        next = s.end_layer;
      }
      EXPECT_EQ(next, layers) << layers << " layers, pp " << pp;
      EXPECT_LE(largest - smallest, 1) << layers << " layers, pp " << pp;
    }
  }
}

TEST(SplitLayers, RejectsADegreeOutsideOneToLayers) {
  for (int pp : {0, -1, 5}) {
    try {
      split_layers(4, pp);
      ADD_FAILURE() << "pp " << pp << " accepted";
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("pp " + std::to_string(pp) + " outside [1, layers = 4]"), std::string::npos) << what;
    }
  }
}

// A cost-weighted split (docs/pipeline.md's example) becomes the same ranges.
TEST(SplitLayers, ALayoutSplitGivesItsRanges) {
  layout::StageSplitInput in;
  in.layers = 12;
  in.pp = 5;
  EXPECT_EQ(stage_ranges(layout::split_stages(in)),
            (std::vector<StageRange>{{0, 1}, {1, 3}, {3, 6}, {6, 9}, {9, 12}}));
}

TEST(StageRange, ValidationNamesTheField) {
  GptConfig c = testing::small_test_config();
  c.layers = 4;
  const auto error = [&](StageRange s) {
    try {
      s.validate(c);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error({-1, 2}).find("first_layer"), std::string::npos);
  EXPECT_NE(error({2, 2}).find("end_layer"), std::string::npos);
  EXPECT_NE(error({1, 5}).find("end_layer"), std::string::npos);
  EXPECT_EQ(error({1, 3}), "");
  EXPECT_EQ(StageRange::whole(c), (StageRange{0, 4}));
  EXPECT_TRUE((StageRange{0, 2}).has_embedding());
  EXPECT_FALSE((StageRange{0, 2}).has_head(c));
  EXPECT_TRUE((StageRange{2, 4}).has_head(c));
  EXPECT_TRUE(StageRange::whole(c).is_whole(c));
  EXPECT_FALSE((StageRange{1, 4}).is_whole(c));
}

// ---- layouts ---------------------------------------------------------------

// Five layers: no degree tested (2, 3, 4) divides them.
GptConfig five_layers(GptConfig c) {
  c.layers = 5;
  return c;
}

// The whole model's tensor names in the order checkpoints rely on (docs/model.md).
std::vector<std::string> whole_names(const GptConfig& c) {
  const std::vector<std::string> block =
      c.llama() ? std::vector<std::string>{"ln1_w", "qkv_w", "proj_wt", "ln2_w", "fc1_w", "fc2_wt"}
                : std::vector<std::string>{"ln1_w", "ln1_b", "qkv_w", "qkv_b", "proj_wt", "proj_b",
                                           "ln2_w", "ln2_b", "fc1_w", "fc1_b", "fc2_wt", "fc2_b"};
  std::vector<std::string> names = c.llama() ? std::vector<std::string>{"wte"}
                                             : std::vector<std::string>{"wte", "wpe"};
  for (int l = 0; l < c.layers; ++l)
    for (const std::string& b : block) names.push_back("h" + std::to_string(l) + "." + b);
  for (const char* n : c.llama() ? std::vector<const char*>{"lnf_w", "lm_head"}
                                 : std::vector<const char*>{"lnf_w", "lnf_b"})
    names.emplace_back(n);
  return names;
}

std::vector<std::string> names_of(const ParameterLayout& layout) {
  std::vector<std::string> names;
  for (const TensorSpec& t : layout.tensors()) names.push_back(t.name);
  return names;
}

const std::vector<GptConfig> kConfigs = {five_layers(testing::small_test_config()),
                                         five_layers(testing::llama_test_config())};

TEST(StageLayout, TheWholeRangeIsTheWholeModelsLayout) {
  for (const GptConfig& c : kConfigs) {
    const ParameterLayout lay(c, Shard::full(c), StageRange::whole(c));
    EXPECT_EQ(names_of(lay), whole_names(c));
    std::int64_t next = 0;
    for (std::size_t i = 0; i < lay.tensors().size(); ++i) {
      const TensorSpec& t = lay.tensors()[i];
      EXPECT_EQ(t.offset, next) << t.name;
      EXPECT_EQ(t.whole_index, i) << t.name;
      next += t.count;
    }
    EXPECT_EQ(lay.size(), parameter_count(c));
  }
}

// The tensors outside the blocks a stage must hold, by family and position.
std::set<std::string> outer_names(const GptConfig& c, bool first, bool last) {
  std::set<std::string> names;
  if (first) names.insert("wte");
  if (first && !c.llama()) names.insert("wpe");
  if (last && c.llama()) names.insert({"lnf_w", "lm_head"});
  if (last && !c.llama()) names.insert({"lnf_w", "lnf_b", "wte"});  // the tied head: a copy of wte
  return names;
}

TEST(StageLayout, EachStageHoldsItsLayersAndItsEndsInTheWholeOrder) {
  for (const GptConfig& c : kConfigs) {
    const Shard shard = testing::random_shards(c, 2, 3)[1];
    const ParameterLayout whole(c, shard);
    for (int pp : {2, 3, 4}) {
      std::set<std::string> all;
      std::int64_t elements = 0;
      for (const StageRange& s : split_layers(static_cast<int>(c.layers), pp)) {
        const ParameterLayout lay(c, shard, s);
        std::set<std::string> outer;
        std::int64_t next = 0;
        std::size_t previous = 0;
        for (const TensorSpec& t : lay.tensors()) {
          const TensorSpec& w = whole[t.name];
          EXPECT_EQ(t.whole_index, whole.index_of(t.name));
          EXPECT_TRUE(&t == &lay.tensors().front() || t.whole_index > previous) << t.name << ": not in the whole order";
          previous = t.whole_index;
          EXPECT_EQ(t.offset, next) << t.name;
          EXPECT_EQ(t.units, w.units);
          EXPECT_EQ(t.count, w.count);
          EXPECT_EQ(t.layer, w.layer);
          next += t.count;
          if (t.layer < 0) outer.insert(t.name);
          else EXPECT_TRUE(s.holds_layer(t.layer)) << t.name << " in " << to_string(s);
          all.insert(t.name);
        }
        EXPECT_EQ(next, lay.size());
        elements += lay.size();
        EXPECT_EQ(outer, outer_names(c, s.has_embedding(), s.has_head(c))) << to_string(s);
        for (int l = s.first_layer; l < s.end_layer; ++l) {
          const auto [first, end] = lay.layer_range(l);
          EXPECT_EQ(end - first, c.llama() ? 6u : 12u);
          for (std::size_t i = first; i < end; ++i) EXPECT_EQ(lay.tensors()[i].layer, l);
        }
      }
      const std::vector<std::string> names = whole_names(c);
      EXPECT_EQ(all, std::set<std::string>(names.begin(), names.end())) << "pp " << pp;
      // Every tensor once, GPT-2's wte twice (the first and the last stage).
      EXPECT_EQ(elements, whole.size() + (c.llama() ? 0 : whole["wte"].count)) << "pp " << pp;
    }
  }
}

TEST(StageLayout, ALayerOutsideTheStageIsAnError) {
  const GptConfig c = kConfigs[0];
  const ParameterLayout lay(c, Shard::full(c), {2, 4});
  for (int l : {1, 4, -1}) {
    try {
      lay.layer_range(l);
      ADD_FAILURE() << "layer " << l << " accepted";
    } catch (const std::out_of_range& e) {
      EXPECT_NE(std::string(e.what()).find("layer " + std::to_string(l)), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("layers [2, 4)"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(ParameterLayout(c, Shard::full(c), {3, 6}), std::invalid_argument);
}

// Scatter and init by name: a stage gets the whole model's values, and the
// stages together give them all back.
TEST(StageLayout, ScatterGatherAndInitMatchTheWholeModelByName) {
  for (const GptConfig& c : kConfigs) {
    for (const Shard& shard : testing::random_shards(c, 2, 11)) {
      const ParameterLayout full(c, Shard::full(c));
      std::vector<float> values(static_cast<std::size_t>(full.size()));
      init_parameters(full, values, 9);
      std::vector<float> rebuilt(values.size(), 0.0f);
      for (const StageRange& s : split_layers(static_cast<int>(c.layers), 3)) {
        const ParameterLayout lay(c, shard, s);
        std::vector<float> scattered(static_cast<std::size_t>(lay.size())), drawn(scattered.size());
        scatter_from_full(full, values, lay, scattered);
        init_parameters(lay, drawn, 9);
        EXPECT_EQ(drawn, scattered) << to_string(s);
        gather_into_full(lay, scattered, full, rebuilt, true);
      }
      // The rank's units of every tensor, from the whole model.
      const ParameterLayout whole(c, shard);
      std::vector<float> in_whole(static_cast<std::size_t>(whole.size()));
      std::vector<float> expected(values.size(), 0.0f);
      scatter_from_full(full, values, whole, in_whole);
      gather_into_full(whole, in_whole, full, expected, true);
      EXPECT_EQ(rebuilt, expected);
    }
  }
}

// ---- exactness: chained stages against the whole model ----------------------

// One rank's result of a step: the loss, each tensor's gradient by name, and
// each model's tensors that backward did not report ready exactly once.
struct StepResult {
  LossStats loss;
  std::map<std::string, std::vector<float>> grads;
  std::vector<std::string> report_errors;
};

constexpr float kLossScale = 1.0f / 48.0f;

// Runs m's backward (the stage's, from `doutput`) and checks that it
// reported each of its tensors ready exactly once.
std::span<const float> backward_counted(Model& m, std::span<const float> doutput, StepResult& run) {
  std::vector<int> seen(m.layout().tensors().size(), 0);
  BackwardHooks hooks;
  hooks.grads_ready = [&seen](std::size_t first, std::size_t last) {
    for (std::size_t i = first; i < last; ++i) ++seen[i];
  };
  std::span<const float> dinput;
  if (m.stage().is_whole(m.config())) m.backward(hooks);
  else dinput = m.backward_stage(doutput, hooks);
  for (std::size_t i = 0; i < seen.size(); ++i)
    if (seen[i] != 1)
      run.report_errors.push_back(to_string(m.stage()) + ": " + m.layout().tensors()[i].name + " reported " +
                                  std::to_string(seen[i]) + " times");
  return dinput;
}

void record_grads(Model& m, StepResult& run, bool skip_wte) {
  for (const TensorSpec& t : m.layout().tensors()) {
    if (skip_wte && t.name == "wte") continue;
    const auto g = m.grad(t.name);
    run.grads[t.name].assign(g.begin(), g.end());
  }
}

StepResult whole_run(Model& m, const Batch& batch) {
  StepResult run;
  m.set_loss_scale(kLossScale);
  m.zero_grad();
  run.loss = m.forward(batch);
  backward_counted(m, {}, run);
  record_grads(m, run, false);
  return run;
}

// The stages chained in order, then backward in reverse. With `wrong_input`
// set, the second stage is fed the first stage's output for that batch
// instead of `batch`'s (a pipeline that mixed up its micro-batches).
//
// GPT-2's tied wte: the last stage holds the LM head's part of its gradient,
// the first stage the embedding's. The whole model adds the embedding's
// terms, position by position, onto the LM head's part; so does the first
// stage when its wte gradient starts from the last stage's (what the trainer's
// sum of the two provides), which makes the sum exact rather than a
// reassociated one.
StepResult staged_run(std::vector<std::unique_ptr<Model>>& stages, const Batch& batch,
               const Batch* wrong_input = nullptr) {
  StepResult run;
  std::vector<float> swapped;
  std::span<const float> input;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    Model& s = *stages[i];
    s.set_loss_scale(kLossScale);
    s.zero_grad();
    if (i == 0 && wrong_input != nullptr) {
      const auto other = s.forward_stage(*wrong_input).output;
      swapped.assign(other.begin(), other.end());
    }
    const StageForward f = s.forward_stage(batch, input);
    input = i == 0 && wrong_input != nullptr ? std::span<const float>(swapped) : f.output;
    if (i + 1 == stages.size()) run.loss = f.loss;
  }
  Model& first = *stages.front();
  Model& last = *stages.back();
  std::span<const float> doutput;
  for (std::size_t i = stages.size(); i-- > 0;) {
    Model& s = *stages[i];
    if (i == 0 && !s.config().llama()) {
      const auto head_part = last.grad("wte");
      std::copy(head_part.begin(), head_part.end(), s.grad("wte").begin());  // settles the zero_grad
    }
    doutput = backward_counted(s, doutput, run);
    record_grads(s, run, &s == &last && &s != &first);
  }
  EXPECT_TRUE(doutput.empty()) << "the first stage returns no input gradient";
  return run;
}

// Every difference between two runs: the loss, any gradient element (equal
// values required, ±0 alike), a tensor missing on either side, a tensor not
// reported ready exactly once by its model.
std::vector<std::string> differences(const StepResult& whole, const StepResult& staged) {
  std::vector<std::string> found;
  if (whole.loss.sum != staged.loss.sum || whole.loss.tokens != staged.loss.tokens)
    found.push_back("loss " + std::to_string(staged.loss.sum) + " vs " + std::to_string(whole.loss.sum));
  for (const auto& [name, want] : whole.grads) {
    const auto got = staged.grads.find(name);
    if (got == staged.grads.end()) {
      found.push_back(name + ": missing");
      continue;
    }
    for (std::size_t i = 0; i < want.size(); ++i) {
      if (got->second.size() != want.size() || got->second[i] != want[i]) {
        found.push_back(name + "[" + std::to_string(i) + "] differs");
        break;
      }
    }
  }
  if (staged.grads.size() != whole.grads.size()) found.push_back("tensor sets differ");
  found.insert(found.end(), whole.report_errors.begin(), whole.report_errors.end());
  found.insert(found.end(), staged.report_errors.begin(), staged.report_errors.end());
  return found;
}

// Runs body(shard, group) on each of `tp` ranks (threads; no group at TP 1).
void on_ranks(const GptConfig& c, int tp, const std::function<void(const Shard&, comm::Group*)>& body) {
  openblas_set_num_threads(1);  // ranks are threads of this process
  if (tp == 1) return body(Shard::full(c), nullptr);
  const auto shards = testing::random_shards(c, tp, 500 + static_cast<std::uint32_t>(tp));
  comm::testing::run_group(tp, "tp", [&](comm::Group& group) {
    body(shards[static_cast<std::size_t>(group.rank())], &group);
  });
}

std::vector<std::unique_ptr<Model>> make_stages(const GptConfig& c, const Shard& shard, tensor::Context& ctx,
                                                comm::Group* tp, int pp) {
  std::vector<std::unique_ptr<Model>> stages;
  for (const StageRange& s : split_layers(static_cast<int>(c.layers), pp)) {
    stages.push_back(std::make_unique<Model>(c, shard, ctx, tp, s));
    stages.back()->init(42);
  }
  return stages;
}

// Chains pp 2, 3 and 4 stages on every rank and compares each with the
// rank's whole model; returns each rank's differences.
std::vector<std::string> stage_chain_differences(const GptConfig& c, int tp) {
  const auto batch = testing::random_batch(c, 2, 8, 17);
  std::vector<std::vector<std::string>> found(static_cast<std::size_t>(tp));
  on_ranks(c, tp, [&](const Shard& shard, comm::Group* group) {
    tensor::Context ctx({1});
    Model whole(c, shard, ctx, group);
    whole.init(42);
    const StepResult want = whole_run(whole, batch.view());
    auto& mine = found[static_cast<std::size_t>(group != nullptr ? group->rank() : 0)];
    for (int pp : {2, 3, 4}) {
      auto stages = make_stages(c, shard, ctx, group, pp);
      for (const auto& s : stages)
        for (const TensorSpec& t : s->layout().tensors())
          if (!std::ranges::equal(s->param(t.name), whole.param(t.name)))
            mine.push_back("pp " + std::to_string(pp) + ": init of " + t.name);
      for (const std::string& d : differences(want, staged_run(stages, batch.view())))
        mine.push_back("pp " + std::to_string(pp) + ": " + d);
    }
  });
  std::vector<std::string> all;
  for (std::size_t r = 0; r < found.size(); ++r)
    for (const std::string& d : found[r]) all.push_back("rank " + std::to_string(r) + " " + d);
  return all;
}

class StageChain : public ::testing::TestWithParam<int> {};

TEST_P(StageChain, Gpt2StagesGiveTheWholeModelsBits) {
  for (const std::string& d : stage_chain_differences(kConfigs[0], GetParam())) ADD_FAILURE() << d;
}

TEST_P(StageChain, LlamaStagesGiveTheWholeModelsBits) {
  for (const std::string& d : stage_chain_differences(kConfigs[1], GetParam())) ADD_FAILURE() << d;
}

INSTANTIATE_TEST_SUITE_P(Degrees, StageChain, ::testing::Values(1, 2),
                         [](const auto& param_info) { return "tp" + std::to_string(param_info.param); });

// The checker sees a broken pipeline: the second stage fed another
// micro-batch's activations, and one gradient element one ulp off.
TEST(StageChainChecker, RejectsAnotherMicroBatchsActivationsAndAOneUlpGradient) {
  for (const GptConfig& c : kConfigs) {
    const auto batch = testing::random_batch(c, 2, 8, 17);
    const auto other_batch = testing::random_batch(c, 2, 8, 18);
    const Batch other = other_batch.view();
    tensor::Context ctx({1});
    Model whole(c, Shard::full(c), ctx);
    whole.init(42);
    const StepResult want = whole_run(whole, batch.view());
    auto stages = make_stages(c, Shard::full(c), ctx, nullptr, 3);
    const StepResult good = staged_run(stages, batch.view());
    EXPECT_TRUE(differences(want, good).empty());
    EXPECT_FALSE(differences(want, staged_run(stages, batch.view(), &other)).empty());
    StepResult nudged = good;
    float& g = nudged.grads["h2.fc1_w"][7];
    g = std::nextafter(g, INFINITY);
    const auto found = differences(want, nudged);
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0], "h2.fc1_w[7] differs");
  }
}

// The norm over the stages counts the tied wte once: the first stage counts
// it (holding the sum of both parts, as after the trainer's sum), the last
// stage not. The sums of squares add up in another order, hence the bound.
TEST(StageModel, GradientNormOverTheStagesIsTheWholeModels) {
  const GptConfig c = kConfigs[0];
  const auto batch = testing::random_batch(c, 2, 8, 17);
  tensor::Context ctx({1});
  Model whole(c, Shard::full(c), ctx);
  whole.init(42);
  whole_run(whole, batch.view());
  auto stages = make_stages(c, Shard::full(c), ctx, nullptr, 2);
  staged_run(stages, batch.view());
  double sum = 0.0;
  for (const auto& s : stages) sum += s->local_grad_sq_norm();
  const double want = whole.local_grad_sq_norm();
  EXPECT_NEAR(sum, want, 1e-12 * want);
}

// load_full gives a stage the whole model's values of its tensors.
TEST(StageModel, LoadFullLoadsTheStagesTensors) {
  for (const GptConfig& c : kConfigs) {
    tensor::Context ctx({1});
    Model whole(c, Shard::full(c), ctx);
    whole.init(3);
    const std::vector<float> full = whole.gather_full();
    for (const StageRange& s : split_layers(static_cast<int>(c.layers), 3)) {
      Model stage(c, Shard::full(c), ctx, nullptr, s);
      stage.load_full(full);
      for (const TensorSpec& t : stage.layout().tensors())
        EXPECT_TRUE(std::ranges::equal(stage.param(t.name), whole.param(t.name))) << t.name;
    }
  }
}

// ---- bad input -------------------------------------------------------------

template <typename Error>
std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The GPT-2 test model in pp stages, a micro-batch of 2 x 8 and a residual
// stream of its size.
struct ErrorCase {
  explicit ErrorCase(int pp)
      : c(kConfigs[0]), batch(testing::random_batch(c, 2, 8, 1)), ctx({1}),
        stages(make_stages(c, Shard::full(c), ctx, nullptr, pp)),
        residual(static_cast<std::size_t>(2 * 8 * c.d_model), 0.5f) {}
  GptConfig c;
  testing::TokenBatch batch;
  tensor::Context ctx;
  std::vector<std::unique_ptr<Model>> stages;
  std::vector<float> residual;
};

TEST(StageErrors, BoundaryActivationsOfTheWrongSizeAreRefused) {
  ErrorCase e(3);
  const auto& batch = e.batch;
  Model& first = *e.stages[0];
  Model& middle = *e.stages[1];
  Model& last = *e.stages[2];
  const std::vector<float>& residual = e.residual;
  const std::span<const float> short_one = std::span(residual).first(residual.size() - 1);

  const std::string given = error_of<std::invalid_argument>([&] { first.forward_stage(batch.view(), residual); });
  EXPECT_TRUE(has(given, "input has 704 floats") && has(given, "layers [0, 2)") && has(given, "takes 0")) << given;
  const std::string wrong = error_of<std::invalid_argument>([&] { middle.forward_stage(batch.view(), short_one); });
  EXPECT_TRUE(has(wrong, "input has 703 floats") && has(wrong, "takes 704")) << wrong;
  EXPECT_TRUE(has(error_of<std::invalid_argument>([&] { middle.forward_stage(batch.view()); }), "input has 0"));

  EXPECT_TRUE(has(error_of<std::logic_error>([&] { middle.backward_stage(residual); }), "without a preceding forward"));
  const auto out = first.forward_stage(batch.view()).output;
  const auto mid = middle.forward_stage(batch.view(), out).output;
  last.forward_stage(batch.view(), mid);
  EXPECT_TRUE(has(error_of<std::invalid_argument>([&] { last.backward_stage(residual); }), "doutput has 704"));
  EXPECT_TRUE(has(error_of<std::invalid_argument>([&] { middle.backward_stage(short_one); }), "doutput has 703"));
  // A refused call leaves the forward in place for a correct one.
  EXPECT_EQ(middle.backward_stage(last.backward_stage({})).size(), residual.size());
}

// Activation slots: a backward consumes its own slot's forward only, and a
// slot outside [0, kMaxSlots) is refused.
TEST(StageErrors, ABackwardNeedsAForwardInItsOwnSlot) {
  ErrorCase e(2);
  Model& last = *e.stages[1];
  const std::vector<float>& residual = e.residual;
  last.select_slot(1);
  last.forward_stage(e.batch.view(), residual);
  last.select_slot(0);
  EXPECT_TRUE(has(error_of<std::logic_error>([&] { last.backward_stage({}); }), "without a preceding forward"));
  last.select_slot(1);
  EXPECT_EQ(last.backward_stage({}).size(), residual.size());
  EXPECT_TRUE(has(error_of<std::logic_error>([&] { last.backward_stage({}); }), "without a preceding forward"));
  EXPECT_TRUE(has(error_of<std::invalid_argument>([&] { last.select_slot(-1); }), "slot -1 outside [0, 64)"));
  EXPECT_TRUE(has(error_of<std::invalid_argument>([&] { last.select_slot(Model::kMaxSlots); }), "slot 64"));
  EXPECT_EQ(last.slot(), 1);
}

TEST(StageErrors, TheWholeModelCallsAndTheEmbeddingSplitNeedTheWholeModel) {
  const GptConfig c = kConfigs[0];
  const auto batch = testing::random_batch(c, 2, 8, 1);
  tensor::Context ctx({1});
  Model first(c, Shard::full(c), ctx, nullptr, {0, 2});
  Model last(c, Shard::full(c), ctx, nullptr, {2, 5});
  EXPECT_TRUE(has(error_of<std::logic_error>([&] { first.forward(batch.view()); }), "forward_stage"));
  EXPECT_TRUE(has(error_of<std::logic_error>([&] { first.backward(); }), "layers [0, 2) of 5"));
  EXPECT_TRUE(has(error_of<std::logic_error>([&] { first.gather_full(); }), "gather_full"));
  const std::vector<std::int32_t> tokens = {1, 2};
  EXPECT_TRUE(has(error_of<std::logic_error>([&] { first.next_token_probs(tokens); }), "next_token_probs"));
  BackwardHooks split;
  split.embedding_rows = [](const EmbeddingRows&) {};
  const auto out = first.forward_stage(batch.view()).output;
  EXPECT_TRUE(has(error_of<std::logic_error>([&] { first.backward_stage(out, split); }), "embedding split"));
  last.forward_stage(batch.view(), out);
  EXPECT_TRUE(has(error_of<std::logic_error>([&] { last.backward_stage({}, split); }), "embedding split"));
  Batch no_targets = batch.view();
  no_targets.targets = nullptr;
  EXPECT_TRUE(has(error_of<std::invalid_argument>([&] { last.forward_stage(no_targets, out); }), "targets"));
  EXPECT_THROW(Model(c, Shard::full(c), ctx, nullptr, {4, 6}), std::invalid_argument);
}

// Stages run on the CPU only (model.h): a GPU context refuses a partial one.
TEST(StageErrors, APartialStageOnAGpuIsRefused) {
  if (tensor::Gpu::count() == 0) GTEST_SKIP() << "no CUDA device visible";
  const GptConfig c = kConfigs[0];
  tensor::Context ctx(tensor::ThreadSetup{1, tensor::GemmBackend::kOneDnn, true});
  const std::string error =
      error_of<std::invalid_argument>([&] { Model(c, Shard::full(c), ctx, nullptr, {0, 2}); });
  EXPECT_TRUE(has(error, "CPU only") && has(error, "layers [0, 2) of 5")) << error;
  EXPECT_NO_THROW(Model(c, Shard::full(c), ctx, nullptr, StageRange::whole(c)));
}

}  // namespace
}  // namespace ntp::model
