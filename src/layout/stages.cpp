#include "layout/stages.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "layout/errors.h"

namespace ntp::layout {

namespace {

void require_cost(double cost, const std::string& field, bool zero_allowed) {
  if (std::isfinite(cost) && (cost > 0 || (zero_allowed && cost == 0))) return;
  throw std::invalid_argument("stage split: " + field + " must be " +
                              (zero_allowed ? ">= 0" : "> 0") + " and finite, got " +
                              std::to_string(cost));
}

void check_input(const StageSplitInput& in) {
  require_positive(in.layers, "stage split: layers");
  if (in.pp < 1 || in.pp > in.layers)
    throw std::invalid_argument("parallel.pp must be in [1, layers = " + std::to_string(in.layers) +
                                "] (every stage holds at least one block), got " +
                                std::to_string(in.pp));
  require_cost(in.block_cost, "block_cost", false);
  require_cost(in.embedding_cost, "embedding_cost", true);
  require_cost(in.head_cost, "head_cost", true);
}

// The most blocks a stage can hold: the others hold at least one each.
int max_blocks(const StageSplitInput& in) {
  return in.layers - in.pp + 1;
}

// The most blocks `stage` can hold at a cost <= bound (0 when not even one
// fits). stage_cost grows with the block count, so a binary search over it
// agrees with stage_cost exactly, with no rounding of a division.
int capacity(const StageSplitInput& in, int stage, double bound) {
  int low = 0, high = max_blocks(in);
  while (low < high) {
    const int mid = low + (high - low + 1) / 2;
    if (stage_cost(in, stage, mid) <= bound)
      low = mid;
    else
      high = mid - 1;
  }
  return low;
}

bool fits(const StageSplitInput& in, double bound) {
  long long held = 0;
  for (int s = 0; s < in.pp; ++s) {
    const int c = capacity(in, s, bound);
    if (c < 1) return false;
    held += c;
  }
  return held >= in.layers;
}

// The optimal bottleneck is the cost of one stage of the optimal split, so it
// is one of these. Middle stages all cost the same per block count, so stage 1
// stands for them.
std::vector<double> candidate_bottlenecks(const StageSplitInput& in) {
  std::vector<double> out;
  for (const int s : {0, std::min(1, in.pp - 1), in.pp - 1})
    for (int n = 1; n <= max_blocks(in); ++n) out.push_back(stage_cost(in, s, n));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// The smallest candidate that fits: fitting is monotone in the bound, and the
// largest candidate always fits (every stage can then hold layers - pp + 1).
double least_bottleneck(const StageSplitInput& in) {
  const std::vector<double> candidates = candidate_bottlenecks(in);
  return *std::partition_point(candidates.begin(), candidates.end(),
                               [&](double bound) { return !fits(in, bound); });
}

// From the last stage back, each stage takes as many blocks as the bound
// allows while leaving one for every earlier stage: the lexicographically
// smallest counts (stages.h, "Ties").
std::vector<int> blocks_per_stage(const StageSplitInput& in, double bound) {
  std::vector<int> blocks(static_cast<size_t>(in.pp));
  int left = in.layers;
  for (int s = in.pp - 1; s >= 0; --s) {
    const int n = s == 0 ? left : std::min(capacity(in, s, bound), left - s);
    blocks[static_cast<size_t>(s)] = n;
    left -= n;
  }
  return blocks;
}

}  // namespace

double stage_cost(const StageSplitInput& in, int stage, int blocks) {
  double cost = blocks * in.block_cost;
  if (stage == 0) cost += in.embedding_cost;
  if (stage == in.pp - 1) cost += in.head_cost;
  return cost;
}

int StageSplit::stage_of_layer(int layer) const {
  const int layers = stages.empty() ? 0 : stages.back().last;
  if (layer < 0 || layer >= layers)
    throw std::invalid_argument("stage_of_layer: layer " + std::to_string(layer) +
                                " is outside [0, " + std::to_string(layers) + ")");
  const auto it = std::upper_bound(stages.begin(), stages.end(), layer,
                                   [](int l, const Stage& s) { return l < s.last; });
  return static_cast<int>(it - stages.begin());
}

StageSplit split_stages(const StageSplitInput& in) {
  check_input(in);
  StageSplit split;
  split.bottleneck = least_bottleneck(in);
  int first = 0;
  const std::vector<int> blocks = blocks_per_stage(in, split.bottleneck);
  for (int s = 0; s < in.pp; ++s) {
    const int n = blocks[static_cast<size_t>(s)];
    split.stages.push_back({first, first + n, stage_cost(in, s, n)});
    first += n;
  }
  return split;
}

}  // namespace ntp::layout
