#pragma once
// What the tests of a SIMD kernel against the plain loops it replaced
// (tensor::reference) share: normal random inputs and a bit-for-bit compare.
#include <bit>
#include <cstdint>
#include <random>
#include <vector>

namespace ntp::tensor::testing {

inline std::vector<float> random_vector(std::size_t n, std::uint32_t seed, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(mean, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// Positions where `got` and `want` differ in any bit.
inline int differing_bits(const std::vector<float>& got, const std::vector<float>& want) {
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    bad += std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(want[i]);
  return bad;
}

// Row sizes around the 16 lanes, odd, and the models' d_model.
inline constexpr std::int64_t kDims[] = {1, 7, 16, 33, 256, 768, 1001};

}  // namespace ntp::tensor::testing
