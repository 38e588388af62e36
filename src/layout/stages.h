#pragma once
// Pipeline stages: which transformer blocks each of `pp` stages holds. Pure.
//
// A stage holds a contiguous range of blocks, so an activation crosses each
// stage boundary once per micro-batch (forward) and its gradient once
// (backward). Stage 0 also holds the token embedding, the last stage the final
// norm, the LM head and the loss: with the GPT-2 vocabulary the head costs
// several blocks, so an even block count would make the last stage the
// pipeline's bottleneck. The split therefore weighs each stage by its cost
// and minimises the largest one (the bottleneck): in 1F1B's steady state every
// stage waits for the slowest, so the step is about m x the bottleneck
// (docs/pipeline.md).
//
// Ties. Many splits can share the smallest bottleneck; this one returns the
// lexicographically smallest vector of block counts (n_0, n_1, ...): the
// later stages take as many blocks as the bottleneck allows, the earlier ones
// the rest. Why: in 1F1B stage s holds the activations of up to pp - s
// micro-batches, so giving the early stages fewer blocks lowers the peak
// activation memory of the stage that holds the most. 12 blocks of cost 1 on
// 5 stages: 1, 2, 3, 3, 3 (bottleneck 3).
#include <vector>

namespace ntp::layout {

struct StageSplitInput {
  int layers = 1;             // transformer blocks, >= 1
  int pp = 1;                 // pipeline stages, 1 <= pp <= layers
  double block_cost = 1.0;    // one block's forward + backward, > 0
  double embedding_cost = 0;  // extra on stage 0, >= 0
  double head_cost = 0;       // extra on the last stage (norm, LM head, loss), >= 0
};

// The cost of stage `stage` holding `blocks` blocks: blocks x block_cost plus
// the embedding on stage 0 and the head on the last (both when pp = 1). Every
// cost of the split is computed by this one expression, so comparisons are
// exact.
double stage_cost(const StageSplitInput& in, int stage, int blocks);

struct Stage {
  int first = 0;  // first block
  int last = 0;   // one past the last block
  double cost = 0;
  int blocks() const { return last - first; }
};

struct StageSplit {
  std::vector<Stage> stages;  // in order: stages[0].first = 0, stages[pp-1].last = layers
  double bottleneck = 0;      // the largest stage cost

  // The stage holding block `layer`; throws std::invalid_argument outside
  // [0, layers).
  int stage_of_layer(int layer) const;
};

// The contiguous split minimising the bottleneck, ties as above. Throws
// std::invalid_argument naming `parallel.pp` and the values when pp < 1 or
// pp > layers (every stage holds at least one block), and naming the field for
// layers < 1 or a cost that is negative, not finite, or (block_cost) zero.
StageSplit split_stages(const StageSplitInput& in);

}  // namespace ntp::layout
