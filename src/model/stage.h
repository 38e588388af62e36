#pragma once
// One pipeline stage of a model: the contiguous layer range [first_layer,
// end_layer). The first stage (first_layer 0) also holds the token embedding,
// the last (end_layer = layers) the final norm, the LM head and the loss; a
// single stage holding every layer is the whole model.
#include <string>
#include <vector>

#include "layout/stages.h"
#include "model/config.h"

namespace ntp::model {

struct StageRange {
  int first_layer = 0;
  int end_layer = 0;  // one past the last layer held

  static StageRange whole(const GptConfig& config);

  int layers() const { return end_layer - first_layer; }
  bool holds_layer(int layer) const { return layer >= first_layer && layer < end_layer; }
  bool has_embedding() const { return first_layer == 0; }
  bool has_head(const GptConfig& config) const { return end_layer == config.layers; }
  bool is_whole(const GptConfig& config) const { return has_embedding() && has_head(config); }
  // Throws std::invalid_argument naming the field that is wrong.
  void validate(const GptConfig& config) const;
  bool operator==(const StageRange&) const = default;
};

// "layers [2, 4)"
std::string to_string(const StageRange& stage);

// The stages of a split (layout/stages.h, which decides where they fall).
std::vector<StageRange> stage_ranges(const layout::StageSplit& split);

// `pp` contiguous stages covering [0, layers) in order, each of at least one
// layer, their sizes within one of each other (the first layers % pp stages
// take the extra layer). The plain split, for tests and for equal-cost
// stages; layout::split_stages weighs the embedding and the head and may make
// sizes differ more. Throws std::invalid_argument unless 1 <= pp <= layers.
std::vector<StageRange> split_layers(int layers, int pp);

}  // namespace ntp::model
