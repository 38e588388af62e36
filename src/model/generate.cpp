#include "model/generate.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

namespace ntp::model {

std::int32_t pick_token(std::span<const float> probs, double temperature, double u) {
  if (probs.empty()) throw std::invalid_argument("pick_token: no probabilities");
  if (temperature <= 0) {
    return static_cast<std::int32_t>(std::max_element(probs.begin(), probs.end()) - probs.begin());
  }
  std::vector<double> weights(probs.size());
  double total = 0;
  for (std::size_t i = 0; i < probs.size(); ++i) {
    weights[i] = std::pow(std::max(0.0, static_cast<double>(probs[i])), 1.0 / temperature);
    total += weights[i];
  }
  if (!(total > 0)) return pick_token(probs, 0, u);  // every weight underflowed: the argmax
  double cumulative = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    cumulative += weights[i] / total;
    if (u < cumulative) return static_cast<std::int32_t>(i);
  }
  return static_cast<std::int32_t>(weights.size() - 1);  // rounding at u close to 1
}

std::vector<std::int32_t> generate(Model& model, std::span<const std::int32_t> prompt, std::int64_t count,
                                   double temperature, std::uint64_t seed) {
  if (prompt.empty()) throw std::invalid_argument("generate: the prompt needs at least one token");
  std::vector<std::int32_t> context(prompt.begin(), prompt.end());
  std::vector<std::int32_t> out;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const auto window = static_cast<std::size_t>(model.config().max_seq);
  for (std::int64_t i = 0; i < count; ++i) {
    const std::size_t start = context.size() > window ? context.size() - window : 0;
    const std::vector<float> probs = model.next_token_probs(std::span(context).subspan(start));
    const std::int32_t next = pick_token(probs, temperature, uniform(rng));
    out.push_back(next);
    context.push_back(next);
  }
  return out;
}

}  // namespace ntp::model
