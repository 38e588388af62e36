#include "model/stage.h"

#include <stdexcept>

namespace ntp::model {

StageRange StageRange::whole(const GptConfig& config) { return {0, static_cast<int>(config.layers)}; }

void StageRange::validate(const GptConfig& config) const {
  const auto fail = [&](const char* field, const std::string& why) {
    throw std::invalid_argument(std::string("stage: ") + field + " " + why + " (" + to_string(*this) +
                                " of " + std::to_string(config.layers) + ")");
  };
  if (first_layer < 0) fail("first_layer", "must be >= 0");
  if (end_layer <= first_layer) fail("end_layer", "must be > first_layer: a stage holds at least one layer");
  if (end_layer > config.layers) fail("end_layer", "must be <= the model's layers");
}

std::string to_string(const StageRange& stage) {
  return "layers [" + std::to_string(stage.first_layer) + ", " + std::to_string(stage.end_layer) + ")";
}

std::vector<StageRange> stage_ranges(const layout::StageSplit& split) {
  std::vector<StageRange> stages;
  for (const layout::Stage& s : split.stages) stages.push_back({s.first, s.last});
  return stages;
}

std::vector<StageRange> split_layers(int layers, int pp) {
  if (pp < 1 || pp > layers)
    throw std::invalid_argument("split_layers: pp " + std::to_string(pp) + " outside [1, layers = " +
                                std::to_string(layers) + "] (every stage holds at least one layer)");
  std::vector<StageRange> stages;
  int first = 0;
  for (int s = 0; s < pp; ++s) {
    const int size = layers / pp + (s < layers % pp ? 1 : 0);
    stages.push_back({first, first + size});
    first += size;
  }
  return stages;
}

}  // namespace ntp::model
