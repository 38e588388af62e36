#include "train/evaluate.h"

#include <algorithm>

#include <fmt/format.h>

#include "train/schedule.h"

namespace ntp::train {

std::vector<std::int64_t> eval_samples(const model::TokenData& val, std::int64_t seq_len,
                                       const OptimConfig& train) {
  const std::int64_t count = std::min(train.eval_batches * train.micro_batch, val.samples(seq_len));
  std::vector<std::int64_t> ids(static_cast<std::size_t>(std::max<std::int64_t>(count, 0)));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i);
  return ids;
}

std::vector<std::int64_t> eval_share(const std::vector<std::int64_t>& ids,
                                     const std::vector<std::int64_t>& shares, std::int64_t replica) {
  std::int64_t position = -1;
  std::int64_t training = 0;
  for (std::size_t r = 0; r < shares.size(); ++r) {
    if (shares[r] <= 0) continue;
    if (static_cast<std::int64_t>(r) == replica) position = training;
    ++training;
  }
  std::vector<std::int64_t> mine;
  if (position < 0) return mine;
  for (std::size_t i = static_cast<std::size_t>(position); i < ids.size(); i += static_cast<std::size_t>(training)) {
    mine.push_back(ids[i]);
  }
  return mine;
}

double forward_loss_sum(model::Model& model, const model::TokenData& data,
                        std::span<const std::int64_t> samples, std::int64_t seq_len, std::int64_t micro,
                        const StageIo* stage) {
  std::vector<std::int32_t> inputs;
  std::vector<std::int32_t> targets;
  std::vector<float> activation;
  double sum = 0;
  std::size_t next = 0;
  int index = 0;
  for (std::int64_t n : micro_batches(static_cast<std::int64_t>(samples.size()), micro)) {
    inputs.resize(static_cast<std::size_t>(n * seq_len));
    targets.resize(inputs.size());
    for (std::int64_t i = 0; i < n; ++i, ++next) {
      data.sample(samples[next], seq_len, inputs.data() + i * seq_len, targets.data() + i * seq_len);
    }
    const model::Batch batch{inputs.data(), targets.data(), n, seq_len};
    if (stage == nullptr) {
      sum += model.forward(batch).sum;
      continue;
    }
    if (stage->receive) {
      activation.resize(static_cast<std::size_t>(n * seq_len * model.config().d_model));
      stage->receive(index, activation);
    }
    model.select_slot(0);
    const model::StageForward f = model.forward_stage(batch, stage->receive ? activation : std::span<const float>{});
    if (stage->send) stage->send(index, f.output);
    sum += f.loss.sum;
    ++index;
  }
  return sum;
}

void check_val_data(const model::TokenData& val, std::int64_t seq_len, std::int64_t vocab) {
  if (val.samples(seq_len) < 1) {
    throw ConfigError(fmt::format("data.val_path: '{}' holds {} tokens, fewer than one sequence of {} + 1",
                                  val.path(), val.size(), seq_len));
  }
  if (val.max_token() >= vocab) {
    throw ConfigError(fmt::format("data.val_path: '{}' has token {}, outside the model's vocabulary of {}",
                                  val.path(), val.max_token(), vocab));
  }
}

}  // namespace ntp::train
