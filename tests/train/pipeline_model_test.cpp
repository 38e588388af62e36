// A real model through the 1F1B executor: GPT-2 and Llama (5 layers, which
// no degree tested divides) split into pp 2, 3 and 4 stages, one thread rank
// per stage over loopback Gloo, m micro-batches in flight at once (each in
// its own activation slot). Compared bit for bit with
// - the whole model run over the same micro-batches one after another
//   (every tensor but GPT-2's tied wte, whose two copies hold the LM head's
//   and the embedding's parts: their sum is added in another order), and
// - the same stages chained by hand one micro-batch at a time (every
//   tensor, both wte copies included).
// A backward that takes another micro-batch's slot, and a loss computed
// with another micro-batch's targets, are shown to be caught.
#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/model.h"
#include "model/stage.h"
#include "tests/comm/thread_ranks.h"
#include "tests/model/model_test_util.h"
#include "train/pipeline_executor.h"
#include "train/pipeline_schedule.h"

namespace ntp::train {
namespace {

using model::Model;
using model::StageRange;

constexpr std::uint64_t kSeed = 42;

// Losses per micro-batch; gradients by "stage/tensor" (a name is in one stage
// only, but GPT-2's wte is in the first and the last).
struct Outcome {
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> grads;
};

model::GptConfig five_layers(model::GptConfig c) {
  c.layers = 5;
  return c;
}

std::vector<model::testing::TokenBatch> micro_batches(const model::GptConfig& c, int m) {
  std::vector<model::testing::TokenBatch> out;
  for (int i = 0; i < m; ++i) out.push_back(model::testing::random_batch(c, 2, 8, 100 + static_cast<std::uint32_t>(i)));
  return out;
}

float loss_scale(int m) { return 1.0f / static_cast<float>(m * 2 * 8); }

std::unique_ptr<Model> stage_model(const model::GptConfig& c, tensor::Context& ctx, const StageRange& range, int m) {
  auto s = std::make_unique<Model>(c, model::Shard::full(c), ctx, nullptr, range);
  s->init(kSeed);
  s->set_loss_scale(loss_scale(m));
  s->zero_grad();
  return s;
}

void collect(const Model& s, int stage, Outcome& out) {
  for (const model::TensorSpec& t : s.layout().tensors()) {
    const auto g = const_cast<Model&>(s).grad(t.name);
    out.grads[std::to_string(stage) + "/" + t.name].assign(g.begin(), g.end());
  }
}

// How a stage picks the slot of micro-batch mb's backward (its forward used
// mb % pp), and the data of micro-batch mb's forward on `stage`.
using SlotOf = std::function<int(int mb, int pp)>;
int right_slot(int mb, int pp) { return mb % pp; }
using BatchOf = std::function<int(int mb, int stage)>;
int right_batch(int mb, int /*stage*/) { return mb; }

// pp stages over the executor, 1F1B with m micro-batches.
Outcome pipelined(const model::GptConfig& c, int pp, int m, const SlotOf& backward_slot = right_slot,
                  const BatchOf& batch_of = right_batch) {
  const auto batches = micro_batches(c, m);
  const std::vector<StageRange> ranges = model::split_layers(static_cast<int>(c.layers), pp);
  const PipelineSchedule schedule = one_f_one_b(pp, m);
  const std::size_t boundary = static_cast<std::size_t>(2 * 8 * c.d_model);
  Outcome out;
  out.losses.assign(static_cast<std::size_t>(m), 0.0);
  std::vector<Outcome> per_stage(static_cast<std::size_t>(pp));
  openblas_set_num_threads(1);  // stages are threads of this process
  comm::testing::TempStoreDir dir;
  auto store = comm::open_store(dir.spec());
  comm::testing::rethrow_first(comm::testing::run_threads(pp, [&](int stage) {
    auto group = comm::create_group(store, comm::testing::group_options(pp, stage, "pp"));
    tensor::Context ctx({1});
    auto s = stage_model(c, ctx, ranges[static_cast<std::size_t>(stage)], m);
    StageWork work;
    work.in_elems = work.out_elems = boundary;
    work.forward = [&](int mb, std::span<const float> in, std::span<float> act) {
      s->select_slot(mb % pp);
      const model::StageForward f = s->forward_stage(batches[static_cast<std::size_t>(batch_of(mb, stage))].view(), in);
      if (stage == pp - 1) out.losses[static_cast<std::size_t>(mb)] = f.loss.sum;
      else std::copy(f.output.begin(), f.output.end(), act.begin());
    };
    work.backward = [&](int mb, std::span<const float> grad_out, std::span<float> grad_in) {
      s->select_slot(backward_slot(mb, pp));
      const std::span<const float> d = s->backward_stage(grad_out);
      if (stage > 0) std::copy(d.begin(), d.end(), grad_in.begin());
    };
    run_stage(schedule, stage, StageLinks::paired(group.get(), stage > 0 ? stage - 1 : -1, stage < pp - 1 ? stage + 1 : -1), work,
              /*tag_base=*/100);
    collect(*s, stage, per_stage[static_cast<std::size_t>(stage)]);
  }));
  for (const Outcome& o : per_stage) out.grads.insert(o.grads.begin(), o.grads.end());
  return out;
}

// The same stages chained by hand, one micro-batch after another.
Outcome chained(const model::GptConfig& c, int pp, int m) {
  const auto batches = micro_batches(c, m);
  tensor::Context ctx({1});
  std::vector<std::unique_ptr<Model>> stages;
  for (const StageRange& r : model::split_layers(static_cast<int>(c.layers), pp)) stages.push_back(stage_model(c, ctx, r, m));
  Outcome out;
  for (const auto& b : batches) {
    std::vector<float> act;
    for (auto& s : stages) {
      const model::StageForward f = s->forward_stage(b.view(), act);
      if (s == stages.back()) out.losses.push_back(f.loss.sum);
      else act.assign(f.output.begin(), f.output.end());
    }
    std::vector<float> grad;
    for (auto s = stages.rbegin(); s != stages.rend(); ++s) {
      const std::span<const float> d = (*s)->backward_stage(grad);
      grad.assign(d.begin(), d.end());
    }
  }
  for (std::size_t i = 0; i < stages.size(); ++i) collect(*stages[i], static_cast<int>(i), out);
  return out;
}

// The whole model over the micro-batches one after another.
Outcome whole(const model::GptConfig& c, int m) {
  tensor::Context ctx({1});
  auto w = stage_model(c, ctx, StageRange::whole(c), m);
  Outcome out;
  for (const auto& b : micro_batches(c, m)) {
    out.losses.push_back(w->forward(b.view()).sum);
    w->backward();
  }
  collect(*w, 0, out);
  return out;
}

// Where two outcomes differ; stage prefixes are dropped when `by_name`.
std::vector<std::string> differences(const Outcome& got, const Outcome& want, bool by_name) {
  std::vector<std::string> found;
  if (got.losses != want.losses) found.push_back("losses");
  const auto name_of = [&](const std::string& key) { return by_name ? key.substr(key.find('/') + 1) : key; };
  std::map<std::string, const std::vector<float>*> wanted;
  for (const auto& [key, g] : want.grads) wanted[name_of(key)] = &g;
  for (const auto& [key, g] : got.grads) {
    const std::string name = name_of(key);
    if (by_name && name == "wte" && want.grads.size() < got.grads.size()) continue;  // the tied copies
    const auto it = wanted.find(name);
    if (it == wanted.end()) found.push_back(key + ": not in the reference");
    else if (*it->second != g) found.push_back(key + ": differs");
  }
  return found;
}

class PipelinedModel : public ::testing::TestWithParam<bool> {
 protected:
  model::GptConfig config() const {
    return five_layers(GetParam() ? model::testing::llama_test_config() : model::testing::small_test_config());
  }
};

TEST_P(PipelinedModel, EqualsTheWholeModelAndTheStagesChainedByHandBitForBit) {
  const model::GptConfig c = config();
  for (int pp : {2, 3, 4}) {
    for (int m : {1, 3, 6}) {
      SCOPED_TRACE("pp " + std::to_string(pp) + ", m " + std::to_string(m));
      const Outcome got = pipelined(c, pp, m);
      for (const std::string& d : differences(got, whole(c, m), /*by_name=*/true)) ADD_FAILURE() << "vs whole: " << d;
      for (const std::string& d : differences(got, chained(c, pp, m), /*by_name=*/false))
        ADD_FAILURE() << "vs chained: " << d;
    }
  }
}

// The broken variant: each backward takes the next micro-batch's slot. Its
// run either stops (a slot whose forward was consumed) or gives other bits.
TEST_P(PipelinedModel, ABackwardOnAnotherMicroBatchsActivationsIsCaught) {
  const model::GptConfig c = config();
  const int pp = 2, m = 4;
  bool caught = false;
  try {
    const Outcome got = pipelined(c, pp, m, [](int mb, int p) { return (mb + 1) % p; });
    caught = !differences(got, chained(c, pp, m), false).empty();
  } catch (const std::exception&) {
    caught = true;
  }
  EXPECT_TRUE(caught);
}

// The broken variant: the last stage computes micro-batch mb's loss with
// the next micro-batch's targets: it runs to its end, and the comparison
// with the stages chained by hand rejects it.
TEST_P(PipelinedModel, TheLossOfAnotherMicroBatchsTargetsIsCaught) {
  const model::GptConfig c = config();
  const int pp = 3, m = 4;
  const Outcome got = pipelined(c, pp, m, right_slot, [](int mb, int stage) { return stage == pp - 1 ? (mb + 1) % m : mb; });
  EXPECT_FALSE(differences(got, chained(c, pp, m), false).empty());
}

INSTANTIATE_TEST_SUITE_P(Families, PipelinedModel, ::testing::Values(false, true),
                         [](const auto& family) { return family.param ? "llama" : "gpt2"; });

}  // namespace
}  // namespace ntp::train
