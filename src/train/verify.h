#pragma once
// `ntp train --verify`: replay a finished run's logged sample schedule
// (schedule.jsonl) in one process at TP = 1, DP = 1 and compare the loss of
// every step (metrics.jsonl) and the final parameters (model.bin) with the
// run's. Differences may only come from float reassociation (a different
// micro-batch split, TP partial sums, the order of the DP all-reduce); the
// tolerances below bound that and are documented in docs/train.md.
#include <cstdint>
#include <filesystem>

#include <nlohmann/json.hpp>

namespace ntp::train {

struct VerifyTolerance {
  // max over tensors of ||a - b|| / ||b|| (L2). Not tighter because of the
  // key biases (see verify.cpp): the other tensors agree to about 1e-6.
  double param_rel = 1e-3;
  double loss_abs = 1e-4;   // max over steps of |loss_run - loss_replay|
};

struct VerifyResult {
  bool pass = false;
  double max_param_rel_diff = 0;
  double max_loss_abs_diff = 0;
  std::int64_t steps = 0;
  // {"verify": "pass"|"fail", "max_param_rel_diff": x, "max_loss_abs_diff": y, "steps": n}
  nlohmann::json to_json() const;
};

// Throws std::runtime_error naming the run file that is missing or malformed.
VerifyResult verify_run(const std::filesystem::path& run_dir, const VerifyTolerance& tolerance = {});

}  // namespace ntp::train
