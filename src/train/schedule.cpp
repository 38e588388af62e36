#include "train/schedule.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "power/boost_policy.h"

namespace ntp::train {
namespace {

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Uniform in [0, bound) without modulo bias.
std::uint64_t uniform_below(std::uint64_t& state, std::uint64_t bound) {
  const std::uint64_t limit = ~std::uint64_t{0} - (~std::uint64_t{0} % bound);
  std::uint64_t x = splitmix64(state);
  while (x >= limit) x = splitmix64(state);
  return x % bound;
}

// Largest-remainder seats of `total` by `weights` (power::apportion); no
// seats when there is nothing to place.
std::vector<std::int64_t> apportion(std::int64_t total, const std::vector<double>& weights) {
  if (total <= 0) return std::vector<std::int64_t>(weights.size(), 0);
  return power::apportion(weights, total);
}

bool is_training(const BatchSplitInput& in, std::size_t r) { return in.active[r] >= in.min_tp; }

// Every training replica gets at least one sample: take from the largest share.
void ensure_one_each(const BatchSplitInput& in, std::vector<std::int64_t>& shares) {
  for (std::size_t r = 0; r < shares.size(); ++r) {
    if (!is_training(in, r) || shares[r] > 0) continue;
    const auto largest = std::max_element(shares.begin(), shares.end());
    if (*largest <= 1) break;  // cannot happen when global_batch >= training replicas
    --*largest;
    shares[r] = 1;
  }
}

std::vector<double> slot_weights(const BatchSplitInput& in) {
  std::vector<double> weights(in.active.size(), 0.0);
  for (std::size_t r = 0; r < weights.size(); ++r) {
    if (is_training(in, r)) weights[r] = static_cast<double>(in.active[r]) / static_cast<double>(in.base_tp);
  }
  return weights;
}

std::vector<std::int64_t> proportional_shares(const BatchSplitInput& in) {
  if (in.planned.empty()) return apportion(in.global_batch, slot_weights(in));
  if (in.planned.size() != in.active.size()) {
    throw std::invalid_argument("batch_shares: one planned share per replica expected");
  }
  return in.planned;
}

std::vector<std::int64_t> constant_global_shares(const BatchSplitInput& in) {
  std::int64_t training = 0;
  std::int64_t healthy = 0;
  for (std::size_t r = 0; r < in.active.size(); ++r) {
    training += is_training(in, r) ? 1 : 0;
    healthy += (is_training(in, r) && in.active[r] == in.base_tp) ? 1 : 0;
  }
  if (healthy == 0) return apportion(in.global_batch, slot_weights(in));
  std::vector<std::int64_t> shares(in.active.size(), 0);
  std::vector<double> healthy_weights(in.active.size(), 0.0);
  std::int64_t given = 0;
  for (std::size_t r = 0; r < in.active.size(); ++r) {
    if (!is_training(in, r)) continue;
    if (in.active[r] == in.base_tp) {
      healthy_weights[r] = 1.0;
      continue;
    }
    // floor(B * k / (R * n)) in integers: exact, no float rounding.
    shares[r] = in.global_batch * in.active[r] / (training * in.base_tp);
    given += shares[r];
  }
  const std::vector<std::int64_t> rest = apportion(in.global_batch - given, healthy_weights);
  for (std::size_t r = 0; r < shares.size(); ++r) shares[r] += rest[r];
  return shares;
}

}  // namespace

std::int64_t samples_in(std::int64_t tokens, std::int64_t seq_len) {
  if (seq_len <= 0) throw std::invalid_argument("samples_in: seq_len must be > 0");
  return tokens > 1 ? (tokens - 1) / seq_len : 0;
}

std::vector<std::int64_t> epoch_permutation(std::int64_t count, std::int64_t seed,
                                            std::int64_t epoch) {
  std::vector<std::int64_t> perm(static_cast<std::size_t>(count));
  std::iota(perm.begin(), perm.end(), 0);
  std::uint64_t state = static_cast<std::uint64_t>(seed) * 0xD1B54A32D192ED03ULL ^
                        static_cast<std::uint64_t>(epoch);
  splitmix64(state);
  for (std::int64_t i = count - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(uniform_below(state, static_cast<std::uint64_t>(i + 1)));
    std::swap(perm[static_cast<std::size_t>(i)], perm[static_cast<std::size_t>(j)]);
  }
  return perm;
}

SampleSchedule::SampleSchedule(std::int64_t num_samples, std::int64_t global_batch,
                               DataOrder order, std::int64_t seed)
    : num_samples_(num_samples), global_batch_(global_batch), order_(order), seed_(seed) {
  if (global_batch_ < 1 || num_samples_ < global_batch_) {
    throw ConfigError(fmt::format(
        "train.global_batch: {} sequences per step, but the dataset holds only {} sequences",
        global_batch_, num_samples_));
  }
}

std::vector<std::int64_t> SampleSchedule::step_samples(std::int64_t step) const {
  if (step < 0) throw std::invalid_argument("SampleSchedule: negative step");
  const std::int64_t first = (step % steps_per_epoch()) * global_batch_;
  std::vector<std::int64_t> samples(static_cast<std::size_t>(global_batch_));
  if (order_ == DataOrder::kSequential) {
    std::iota(samples.begin(), samples.end(), first);
    return samples;
  }
  const std::int64_t epoch = epoch_of(step);
  if (epoch != cached_epoch_) {  // one shuffle per epoch, not per step
    cached_permutation_ = epoch_permutation(num_samples_, seed_, epoch);
    cached_epoch_ = epoch;
  }
  std::copy_n(cached_permutation_.begin() + first, global_batch_, samples.begin());
  return samples;
}

BatchSplitInput split_input(const ParallelConfig& parallel, std::int64_t global_batch) {
  BatchSplitInput in;
  in.global_batch = global_batch;
  in.base_tp = parallel.tp;
  in.min_tp = parallel.min_tp;
  for (std::int64_t r = 0; r < parallel.dp; ++r) {
    in.active.push_back(parallel.least_active(r));  // a pipeline runs at its slowest stage
  }
  return in;
}

std::vector<int> policy_active(const BatchSplitInput& in) {
  std::vector<int> active;
  for (std::size_t r = 0; r < in.active.size(); ++r) {
    active.push_back(is_training(in, r) ? static_cast<int>(in.active[r]) : 0);
  }
  return active;
}

std::vector<std::int64_t> batch_shares(BatchPolicy policy, const BatchSplitInput& in) {
  std::vector<std::int64_t> shares;
  switch (policy) {
    case BatchPolicy::kProportional:
      shares = proportional_shares(in);
      break;
    case BatchPolicy::kFixed: {
      std::vector<double> weights(in.active.size(), 0.0);
      for (std::size_t r = 0; r < weights.size(); ++r) weights[r] = is_training(in, r) ? 1.0 : 0.0;
      shares = apportion(in.global_batch, weights);
      break;
    }
    case BatchPolicy::kConstantGlobal:
      shares = constant_global_shares(in);
      break;
  }
  ensure_one_each(in, shares);
  return shares;
}

std::vector<std::vector<std::int64_t>> assign_samples(const std::vector<std::int64_t>& samples,
                                                      const std::vector<std::int64_t>& shares) {
  const std::int64_t total = std::accumulate(shares.begin(), shares.end(), std::int64_t{0});
  if (total != static_cast<std::int64_t>(samples.size())) {
    throw std::invalid_argument(fmt::format(
        "assign_samples: shares sum to {}, the step has {} samples", total, samples.size()));
  }
  std::vector<std::vector<std::int64_t>> out;
  auto next = samples.begin();
  for (std::int64_t share : shares) {
    out.emplace_back(next, next + share);
    next += share;
  }
  return out;
}

std::vector<std::int64_t> micro_batches(std::int64_t share, std::int64_t micro_batch) {
  if (micro_batch < 1) throw std::invalid_argument("micro_batches: micro_batch must be >= 1");
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(share / micro_batch), micro_batch);
  if (share % micro_batch != 0) sizes.push_back(share % micro_batch);
  return sizes;
}

std::vector<std::int64_t> micro_batches(std::int64_t share, std::int64_t micro_batch, std::int64_t count) {
  if (count < 0) throw std::invalid_argument("micro_batches: count must be >= 0");
  if (count == 0) return micro_batches(share, micro_batch);
  const std::int64_t n = std::min(count, share);
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(n), n > 0 ? share / n : 0);
  for (std::int64_t i = 0; i < (n > 0 ? share % n : 0); ++i) ++sizes[static_cast<std::size_t>(i)];
  return sizes;
}

}  // namespace ntp::train
