#pragma once
// Validation loss (data.val_path, train.eval_every, train.eval_batches): a
// fixed set of sequences, the first eval_batches x micro_batch windows of
// the validation tokens, run forward only after the update of every
// eval_every-th step and of the last. The local and the NTP trainer share it.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "model/model.h"
#include "model/token_data.h"
#include "train/config.h"

namespace ntp::train {

// The validation sequences: [0, min(eval_batches x micro_batch, available)).
std::vector<std::int64_t> eval_samples(const model::TokenData& val, std::int64_t seq_len,
                                       const OptimConfig& train);

// Replica `replica`'s part of the validation sequences: every R-th of `ids`
// for the R replicas with a nonzero share (shares per replica, as trained).
std::vector<std::int64_t> eval_share(const std::vector<std::int64_t>& ids,
                                     const std::vector<std::int64_t>& shares, std::int64_t replica);

// A pipeline stage's side of the validation pass: `receive` fills
// micro-batch i's input activation (every stage but the first), `send` passes
// its output on (every stage but the last). Forward only, in micro-batch
// order, so each message waits only on earlier stages: no cycle, no
// deadlock with blocking sends.
struct StageIo {
  std::function<void(int microbatch, std::span<float> input)> receive;
  std::function<void(int microbatch, std::span<const float> output)> send;
};

// The sum of the per-token losses of `samples` (forward passes only, in
// micro-batches of `micro`): no gradient or parameter changes. With `stage`,
// the model is one pipeline stage: only the last stage's sum is the loss
// (the others return 0).
double forward_loss_sum(model::Model& model, const model::TokenData& data,
                        std::span<const std::int64_t> samples, std::int64_t seq_len, std::int64_t micro,
                        const StageIo* stage = nullptr);

// Throws ConfigError naming data.val_path when it has no complete sequence
// or a token outside the model's vocabulary.
void check_val_data(const model::TokenData& val, std::int64_t seq_len, std::int64_t vocab);

}  // namespace ntp::train
