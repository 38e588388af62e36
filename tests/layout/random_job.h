#pragma once
// Seeded random job configurations for the layout property tests: n up to 72,
// U up to the GPT-2 vocabulary (50,304), arbitrary failed slots, several
// degraded replicas with different k, and a min_tp policy.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "layout/job_layout.h"

namespace ntp::layout::testing {

inline constexpr Unit kVocab = 50304;

inline int pick(std::mt19937_64& rng, int lo, int hi) {  // uniform in [lo, hi]
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

// Up to `count` distinct slots of [0, tp), in random order.
inline std::vector<int> random_slots(std::mt19937_64& rng, int tp, int count) {
  std::vector<int> slots(static_cast<size_t>(tp));
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(static_cast<size_t>(std::min(count, tp)));
  return slots;
}

// A failure pattern: each replica is hit with probability `hit`, losing a few
// slots (now and then most of its domain).
inline FailedSlots random_failures(std::mt19937_64& rng, int replicas, int tp, double hit) {
  FailedSlots failed;
  std::bernoulli_distribution hit_replica(hit), big(0.1);
  for (int r = 0; r < replicas; ++r) {
    if (!hit_replica(rng)) continue;
    const int lost = big(rng) ? pick(rng, 1, tp) : pick(rng, 1, std::max(1, std::min(tp, 3)));
    failed[r] = random_slots(rng, tp, lost);
  }
  return failed;
}

inline int random_tp(std::mt19937_64& rng) {
  static constexpr int kCommon[] = {1, 2, 4, 8, 16, 64, 71, 72};
  std::bernoulli_distribution common(0.4);
  return common(rng) ? kCommon[pick(rng, 0, 7)] : pick(rng, 1, 72);
}

// Units: anything from tp (the smallest valid) up to the vocabulary size,
// spread over orders of magnitude.
inline Unit random_units(std::mt19937_64& rng, int tp) {
  std::bernoulli_distribution tiny(0.3);
  if (tiny(rng)) return tp + pick(rng, 0, 3 * tp);
  const double lo = std::log(static_cast<double>(tp)), hi = std::log(static_cast<double>(kVocab));
  const double x = std::uniform_real_distribution<double>(lo, hi)(rng);
  return std::clamp<Unit>(static_cast<Unit>(std::exp(x)), tp, kVocab);
}

inline JobConfig random_config(std::mt19937_64& rng) {
  JobConfig config;
  config.tp = random_tp(rng);
  config.units = random_units(rng, config.tp);
  config.replicas = pick(rng, 1, 10);
  config.failed = random_failures(rng, config.replicas, config.tp, 0.5);
  std::bernoulli_distribution strict(0.3);
  config.min_tp = strict(rng) ? pick(rng, 1, config.tp) : 1;
  return config;
}

inline Unit random_align(std::mt19937_64& rng) {
  static constexpr Unit kAligns[] = {1, 8, 64};
  return kAligns[pick(rng, 0, 2)];
}

// Speeds for about half the replicas: each slot at 1.0 or, now and then,
// anything down to 0.3 of it (fail-slow GPUs), rarely crawling at 0.01-0.1
// (slow enough that an aligned block exceeds its share).
inline SlotSpeeds random_speeds(std::mt19937_64& rng, int replicas, int tp) {
  SlotSpeeds speeds;
  std::bernoulli_distribution listed(0.5), slow(0.3), crawls(0.03);
  std::uniform_real_distribution<double> speed(0.3, 1.0), crawl(0.01, 0.1);
  for (int r = 0; r < replicas; ++r) {
    if (!listed(rng)) continue;
    std::vector<double>& slots = speeds[r];
    for (int s = 0; s < tp; ++s)
      slots.push_back(crawls(rng) ? crawl(rng) : slow(rng) ? speed(rng) : 1.0);
  }
  return speeds;
}

// True when at least one replica has min_tp alive slots.
inline bool some_replica_trains(const JobConfig& config) {
  for (int r = 0; r < config.replicas; ++r)
    if (static_cast<int>(alive_slots(config, r).size()) >= config.min_tp) return true;
  return false;
}

}  // namespace ntp::layout::testing
