// The pipeline stage split: contiguous, every block once, at least one block
// per stage, the bottleneck optimal (against brute force for small cases) with
// the documented tie rule, and the errors. Each checker is first shown to fail
// on a broken split.
#include "layout/stages.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace ntp::layout {
namespace {

std::vector<int> counts_of(const StageSplit& split) {
  std::vector<int> counts;
  for (const Stage& s : split.stages) counts.push_back(s.blocks());
  return counts;
}

// A split made from block counts, with its costs and bottleneck filled in.
StageSplit split_from(const StageSplitInput& in, const std::vector<int>& counts) {
  StageSplit split;
  int first = 0;
  for (size_t s = 0; s < counts.size(); ++s) {
    split.stages.push_back(
        {first, first + counts[s], stage_cost(in, static_cast<int>(s), counts[s])});
    first += counts[s];
  }
  for (const Stage& s : split.stages) split.bottleneck = std::max(split.bottleneck, s.cost);
  return split;
}

// Empty when the split is pp contiguous ranges covering [0, layers) with at
// least one block each, costs and bottleneck as stage_cost gives them, and
// stage_of_layer naming the range that holds each layer; else the first problem.
std::string structure_problem(const StageSplitInput& in, const StageSplit& split) {
  if (split.stages.size() != static_cast<size_t>(in.pp))
    return std::to_string(split.stages.size()) + " stages";
  int expected_first = 0;
  double most = 0;
  for (int s = 0; s < in.pp; ++s) {
    const Stage& st = split.stages[static_cast<size_t>(s)];
    if (st.first != expected_first) return "stage " + std::to_string(s) + " is not contiguous";
    if (st.blocks() < 1) return "stage " + std::to_string(s) + " holds no block";
    if (st.cost != stage_cost(in, s, st.blocks())) return "stage " + std::to_string(s) + " cost";
    most = std::max(most, st.cost);
    expected_first = st.last;
  }
  if (expected_first != in.layers) return "the stages end at " + std::to_string(expected_first);
  if (split.bottleneck != most) return "bottleneck " + std::to_string(split.bottleneck);
  for (int layer = 0; layer < in.layers; ++layer) {
    const Stage& st = split.stages[static_cast<size_t>(split.stage_of_layer(layer))];
    if (layer < st.first || layer >= st.last) return "layer " + std::to_string(layer);
  }
  return "";
}

// Every composition of `layers` into `pp` positive parts, in lexicographic order.
void for_each_split(int layers, int pp, const std::function<void(const std::vector<int>&)>& f) {
  std::vector<int> counts;
  std::function<void(int)> place = [&](int left) {
    const int stages_left = pp - static_cast<int>(counts.size());
    if (stages_left == 1) {
      counts.push_back(left);
      f(counts);
      counts.pop_back();
      return;
    }
    for (int n = 1; n <= left - (stages_left - 1); ++n) {
      counts.push_back(n);
      place(left - n);
      counts.pop_back();
    }
  };
  place(layers);
}

// The first split with the least bottleneck, enumerating in lexicographic
// order: the optimum under stages.h's tie rule.
std::vector<int> brute_force(const StageSplitInput& in) {
  std::vector<int> best;
  double best_bottleneck = 0;
  for_each_split(in.layers, in.pp, [&](const std::vector<int>& counts) {
    const double b = split_from(in, counts).bottleneck;
    if (best.empty() || b < best_bottleneck) best = counts, best_bottleneck = b;
  });
  return best;
}

// Empty when the split has brute force's counts: the least bottleneck, ties
// to the lexicographically smallest counts.
std::string optimality_problem(const StageSplitInput& in, const StageSplit& split) {
  const StageSplit best = split_from(in, brute_force(in));
  if (split.bottleneck > best.bottleneck)
    return "bottleneck " + std::to_string(split.bottleneck) + " > " +
           std::to_string(best.bottleneck);
  if (counts_of(split) != counts_of(best)) return "not the tie rule's split";
  return "";
}

std::string describe(const StageSplitInput& in) {
  return std::to_string(in.layers) + " layers, pp " + std::to_string(in.pp) + ", costs " +
         std::to_string(in.block_cost) + " / " + std::to_string(in.embedding_cost) + " / " +
         std::to_string(in.head_cost);
}

// Costs in halves and small integers: exact in binary, so ties really tie.
StageSplitInput random_input(std::mt19937& rng, int max_layers) {
  const auto pick = [&](int low, int high) {
    return std::uniform_int_distribution(low, high)(rng);
  };
  StageSplitInput in;
  in.layers = pick(1, max_layers);
  in.pp = pick(1, in.layers);
  in.block_cost = pick(1, 4) * 0.5;
  in.embedding_cost = pick(0, 8) * 0.5;
  in.head_cost = pick(0, 12) * 0.5;
  return in;
}

TEST(StageSplit, CheckersFailOnBrokenSplits) {
  const StageSplitInput in{.layers = 6, .pp = 3, .block_cost = 1, .head_cost = 2};
  const StageSplit good = split_stages(in);
  ASSERT_EQ(structure_problem(in, good), "");
  ASSERT_EQ(optimality_problem(in, good), "");
  const auto broken = [&](const std::function<void(StageSplit&)>& change) {
    StageSplit s = good;
    change(s);
    return s;
  };
  EXPECT_NE(structure_problem(in, broken([](StageSplit& s) { s.stages.pop_back(); })), "");
  EXPECT_NE(structure_problem(in, broken([](StageSplit& s) { s.stages[1].first += 1; })),
            "");  // gap
  EXPECT_NE(structure_problem(in, broken([](StageSplit& s) { s.stages[1].first -= 1; })),
            "");  // overlap
  EXPECT_NE(structure_problem(in, broken([](StageSplit& s) { s.stages[2].last -= 1; })),
            "");  // short
  EXPECT_NE(structure_problem(in, broken([](StageSplit& s) { s.stages[0].cost += 1; })), "");
  EXPECT_NE(structure_problem(in, broken([](StageSplit& s) { s.bottleneck -= 0.5; })), "");
  EXPECT_NE(structure_problem(in, split_from(in, {0, 3, 3})), "");  // an empty stage
  // Valid but not optimal (the head's stage as heavy as the rest), and
  // optimal but not the tie rule's choice.
  EXPECT_NE(optimality_problem(in, split_from(in, {2, 2, 2})), "");
  const StageSplitInput even{.layers = 6, .pp = 4};
  ASSERT_EQ(counts_of(split_stages(even)), (std::vector<int>{1, 1, 2, 2}));
  EXPECT_NE(optimality_problem(even, split_from(even, {2, 2, 1, 1})), "");
}

TEST(StageSplit, MatchesBruteForceOnEverySmallCase) {
  // Every (layers, pp) up to 10 layers, over a grid of costs in halves (exact
  // in binary, so ties really tie).
  int checked = 0;
  for (int layers = 1; layers <= 10; ++layers)
    for (int pp = 1; pp <= layers; ++pp)
      for (const double block : {0.5, 1.0, 1.5})
        for (const double embedding : {0.0, 0.5, 1.0, 2.0, 3.5})
          for (const double head : {0.0, 1.0, 2.5, 4.0, 6.0}) {
            const StageSplitInput in{layers, pp, block, embedding, head};
            const StageSplit split = split_stages(in);
            ASSERT_EQ(structure_problem(in, split), "") << describe(in);
            ASSERT_EQ(optimality_problem(in, split), "") << describe(in);
            ++checked;
          }
  EXPECT_EQ(checked, 55 * 3 * 5 * 5);
}

TEST(StageSplit, LargeSplitsAreWellFormedAndNoWorseThanEvenCounts) {
  std::mt19937 rng(35);
  for (int trial = 0; trial < 500; ++trial) {
    const StageSplitInput in = random_input(rng, 200);
    const StageSplit split = split_stages(in);
    ASSERT_EQ(structure_problem(in, split), "") << describe(in);
    // The floor/ceil split is one candidate, so the optimum is at most its bottleneck.
    std::vector<int> even(static_cast<size_t>(in.pp), in.layers / in.pp);
    for (int s = 0; s < in.layers % in.pp; ++s) ++even[static_cast<size_t>(s)];
    EXPECT_LE(split.bottleneck, split_from(in, even).bottleneck);
    // No split's bottleneck is below the average stage cost.
    EXPECT_GE(split.bottleneck,
              (in.layers * in.block_cost + in.embedding_cost + in.head_cost) / in.pp);
  }
}

TEST(StageSplit, LayerCountsThatDoNotDivideTheStages) {
  // 12 blocks on 5 stages: bottleneck 3, the early stages take fewer (they
  // hold more micro-batches' activations in 1F1B).
  const StageSplit split = split_stages({.layers = 12, .pp = 5});
  EXPECT_EQ(counts_of(split), (std::vector<int>{1, 2, 3, 3, 3}));
  EXPECT_EQ(split.bottleneck, 3);
  EXPECT_EQ(split.stage_of_layer(0), 0);
  EXPECT_EQ(split.stage_of_layer(1), 1);
  EXPECT_EQ(split.stage_of_layer(3), 2);
  EXPECT_EQ(split.stage_of_layer(11), 4);
}

TEST(StageSplit, TheHeadAndEmbeddingTakeBlocksOffTheirStages) {
  // A head worth two blocks and half a block of embedding: 2, 4, 4, 2 with
  // costs 2.5, 4, 4, 4, where even counts (3 each) would put 5 on the last stage.
  const StageSplit split =
      split_stages({.layers = 12, .pp = 4, .block_cost = 1, .embedding_cost = 0.5, .head_cost = 2});
  EXPECT_EQ(counts_of(split), (std::vector<int>{2, 4, 4, 2}));
  EXPECT_EQ(split.bottleneck, 4);
  EXPECT_EQ(split.stages[0].cost, 2.5);
  // One stage holds both.
  const StageSplit one = split_stages({.layers = 3, .pp = 1, .embedding_cost = 1, .head_cost = 2});
  EXPECT_EQ(one.stages.size(), 1u);
  EXPECT_EQ(one.bottleneck, 6);
}

// What split_stages throws, or "no error".
std::string message(const StageSplitInput& in) {
  try {
    return "no error, " + std::to_string(split_stages(in).stages.size()) + " stages";
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
}

TEST(StageSplit, ErrorsNameTheFieldAndTheValues) {
  EXPECT_EQ(
      message({.layers = 12, .pp = 13}),
      "parallel.pp must be in [1, layers = 12] (every stage holds at least one block), got 13");
  EXPECT_NE(message({.layers = 12, .pp = 0}).find("parallel.pp"), std::string::npos);
  EXPECT_NE(message({.layers = 12, .pp = -2}).find("got -2"), std::string::npos);
  EXPECT_NE(message({.layers = 0, .pp = 1}).find("layers"), std::string::npos);
  EXPECT_NE(message({.layers = 4, .pp = 2, .block_cost = 0}).find("block_cost"), std::string::npos);
  EXPECT_NE(message({.layers = 4, .pp = 2, .embedding_cost = -1}).find("embedding_cost"),
            std::string::npos);
  EXPECT_NE(message({.layers = 4, .pp = 2, .head_cost = std::nan("")}).find("head_cost"),
            std::string::npos);
  EXPECT_EQ(message({.layers = 4, .pp = 4}), "no error, 4 stages");
  const StageSplit split = split_stages({.layers = 4, .pp = 2});
  EXPECT_THROW(split.stage_of_layer(4), std::invalid_argument);
  EXPECT_THROW(split.stage_of_layer(-1), std::invalid_argument);
}

}  // namespace
}  // namespace ntp::layout
