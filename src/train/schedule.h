#pragma once
// Sample schedule: which samples form the global batch of a step, and which
// replica trains which of them. Pure and deterministic, so every rank computes
// the same schedule on its own and `--verify` can replay it from the log.
//
// A sample is one training sequence: sample i is tokens [i*T, i*T + T + 1) of
// the dataset (T = sequence length), so a dataset of N tokens has
// (N - 1) / T samples. An epoch is floor(samples / global_batch) steps; the
// incomplete tail of an epoch is not used (as llm.c does).
#include <cstdint>
#include <vector>

#include "train/config.h"

namespace ntp::train {

// Samples per dataset of `tokens` tokens at sequence length `seq_len`.
std::int64_t samples_in(std::int64_t tokens, std::int64_t seq_len);

// Seeded permutation of [0, count) for one epoch (Fisher-Yates on SplitMix64;
// identical on every platform, unlike std::shuffle).
std::vector<std::int64_t> epoch_permutation(std::int64_t count, std::int64_t seed,
                                            std::int64_t epoch);

class SampleSchedule {
 public:
  // Throws ConfigError (train.global_batch) when the dataset has fewer samples
  // than one global batch.
  SampleSchedule(std::int64_t num_samples, std::int64_t global_batch, DataOrder order,
                 std::int64_t seed);

  std::int64_t steps_per_epoch() const { return num_samples_ / global_batch_; }
  std::int64_t epoch_of(std::int64_t step) const { return step / steps_per_epoch(); }
  // The global batch of `step`, in order. Sequential order is llm.c's: step s of
  // an epoch is samples [s*B, (s+1)*B), i.e. tokens [s*B*T, (s+1)*B*T + 1).
  // Keeps the last epoch's permutation: not for concurrent use (each rank
  // holds its own schedule).
  std::vector<std::int64_t> step_samples(std::int64_t step) const;

 private:
  std::int64_t num_samples_;
  std::int64_t global_batch_;
  DataOrder order_;
  std::int64_t seed_;
  mutable std::int64_t cached_epoch_ = -1;
  mutable std::vector<std::int64_t> cached_permutation_;
};

// What the batch policy needs to know about the replicas of one configuration.
struct BatchSplitInput {
  std::int64_t global_batch = 1;
  std::int64_t base_tp = 1;             // n
  std::vector<std::int64_t> active;     // k_r: active slots per replica
  std::int64_t min_tp = 1;              // k_r < min_tp: the replica is dropped
  // `proportional` shares planned by the power policy for this configuration
  // (power::plan_boost: k_r/n x the boost speed-up each replica reaches);
  // empty = no boost, weights k_r/n (power::shares_without_boost).
  std::vector<std::int64_t> planned;
};

BatchSplitInput split_input(const ParallelConfig& parallel, std::int64_t global_batch);

// Active slots per replica as the power policy counts them: k_r, or 0 for a
// dropped replica (it sits out and draws nothing).
std::vector<int> policy_active(const BatchSplitInput& input);

// Samples per replica; sums exactly to global_batch; dropped replicas get 0,
// every training replica at least 1 (taken from the largest share if the
// rounding left one at 0). Rounding is largest-remainder with ties to the
// lower replica id (power::apportion).
//   proportional:    `planned` if given, else share ∝ k_r / n
//   fixed:           equal shares over the training replicas
//   constant-global: a degraded replica gets floor(B/R × k_r/n) (its per-slot
//                    load stays that of a healthy replica); the healthy
//                    replicas share the rest equally
std::vector<std::int64_t> batch_shares(BatchPolicy policy, const BatchSplitInput& input);

// Splits a step's samples into contiguous per-replica lists by `shares`.
std::vector<std::vector<std::int64_t>> assign_samples(const std::vector<std::int64_t>& samples,
                                                      const std::vector<std::int64_t>& shares);

// Micro-batch sizes of one replica's share: full micro-batches, then the
// remainder as one smaller micro-batch. Exact because each replica scales its
// loss by 1 / (global tokens of the step), not by micro-batch size.
std::vector<std::int64_t> micro_batches(std::int64_t share, std::int64_t micro_batch);

// Micro-batch sizes of one replica's share under parallel.microbatches =
// `count`: min(count, share) micro-batches whose sizes differ by at most one,
// the larger first; with count 0, micro_batches(share, micro_batch).
std::vector<std::int64_t> micro_batches(std::int64_t share, std::int64_t micro_batch, std::int64_t count);

}  // namespace ntp::train
