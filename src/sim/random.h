#pragma once
// Deterministic random numbers for the simulator: xoshiro256** seeded with
// splitmix64, and inverse-CDF samplers, so a seed gives the same stream on
// every platform and standard library (std:: distributions do not promise that).
#include <cmath>
#include <cstdint>

#include "sim/scenario.h"

namespace ntp::sim {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) {
    for (auto& word : s_) word = splitmix(seed);
  }
  std::uint64_t next() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in (0, 1): never 0, so log() is always finite.
  double open01() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }
  // Uniform integer in [0, n).
  std::uint64_t below(std::uint64_t n) {
    return static_cast<std::uint64_t>(open01() * static_cast<double>(n)) % n;
  }

  // Seeds for independent streams (seed index, placement index, ...).
  static std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
    std::uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull);
    return splitmix(x);
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static std::uint64_t splitmix(std::uint64_t& x) {
    std::uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  std::uint64_t s_[4];
};

// Counter-based streams: draw `i` of stream `key` of element `element` has a
// generator of its own, so what one element draws never depends on how many
// draws any other element made (or on how many elements there are).
inline Rng element_draw(std::uint64_t key, int element, std::uint32_t i) {
  return Rng(Rng::mix(Rng::mix(key, static_cast<std::uint64_t>(element)), i));
}

inline double sample_exponential(Rng& rng, double mean) { return -std::log(rng.open01()) * mean; }

// Weibull with the given shape and mean: scale = mean / Gamma(1 + 1/shape).
inline double sample_weibull(Rng& rng, double shape, double mean) {
  const double scale = mean / std::tgamma(1.0 + 1.0 / shape);
  return scale * std::pow(-std::log(rng.open01()), 1.0 / shape);
}

inline double sample_normal(Rng& rng) {
  const double two_pi = 6.283185307179586;
  return std::sqrt(-2.0 * std::log(rng.open01())) * std::cos(two_pi * rng.open01());
}

inline double sample_repair_hours(Rng& rng, const RepairSpec& r) {
  switch (r.kind) {
    case RepairKind::kFixed: return r.a_hours;
    case RepairKind::kExponential: return sample_exponential(rng, r.a_hours);
    case RepairKind::kUniform: return r.a_hours + (r.b - r.a_hours) * rng.open01();
    case RepairKind::kLognormal: {
      const double mu = std::log(r.a_hours) - 0.5 * r.b * r.b;  // keeps the mean at a_hours
      return std::exp(mu + r.b * sample_normal(rng));
    }
  }
  return r.a_hours;
}

}  // namespace ntp::sim
