#pragma once
// `ntp verify RUN_DIR` and `ntp train --verify`: check a finished run against a
// replay of its logged schedule in one process (TP = 1, DP = 1, LocalTrainer).
// Four checks, each able to fail (docs/train.md, "What --verify proves"):
//
//   updates   every element of model.bin: what training changed (final −
//             initial) against what the replay changed, within a bound derived
//             from float reassociation noise (compare_updates below);
//   scalars   loss and grad_norm of every step of metrics.jsonl against the
//             replay's, matched by step number; a `"skipped": true` step is
//             replayed without its update;
//   samples   schedule.jsonl and metrics.jsonl have one row per step 0..N-1 in
//             order, and each step trained exactly the samples the config's
//             SampleSchedule gives it, each once;
//   holders   hashes/rank-<r>.json (written by multi-process runs): every
//             holder of a unit, in every replica, holds bit-identical state
//             (parameters and AdamW moments), and every rank the same
//             replicated tensors. Skipped, and said so, without hashes/.
//
// model.bin holds one replica in full; the holder check covers the others.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/parameters.h"
#include "tensor/gemm_backend.h"

namespace ntp::train {

// A run directory that cannot be checked: missing or malformed files (named).
class VerifyInputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct VerifyTolerance {
  // Per element: |Δrun − Δref| ≤ update_rtol·|Δref| + update_atol_rms·rms(Δref
  // of the tensor). Reassociation noise is ~1e-6 of an update; a 1 % error is
  // 1e-2 (derivation in docs/train.md).
  double update_rtol = 1e-3;
  double update_atol_rms = 1e-3;
  // Reassociation noise is heavy-tailed: an element whose gradient nearly
  // cancels in some step (m̂ ≈ 0) amplifies it; measured up to ~3x the bound
  // above for ~1 element in 10^4. A tensor may have that many elements over
  // the bound (floor(count x fraction): none in tensors under 1000 elements),
  // none over update_outlier_ratio x the bound or, if larger, over what
  // AdamW's noise can move an element whose gradient cancels to about zero
  // (the key-bias bound below: its updates are noise, whatever the tensor).
  // A 1 % error in a tensor's update puts most of its elements over the bound.
  double update_outlier_fraction = 1e-3;
  double update_outlier_ratio = 10;
  double loss_rel = 1e-5;       // per step: |loss_run − loss_ref| ≤ loss_rel·|loss_ref|
  double grad_norm_rel = 1e-4;  // per step, likewise for grad_norm
};

// The tolerance a run of model.precision is judged by: the fp32 one above,
// or, for bf16 GEMMs, the one derived in docs/train.md ("Tolerances under
// bf16"): the replay rounds the same GEMM inputs, but an input that the run
// and the replay hold a reassociation apart can round to neighbouring bf16
// values, so their difference grows to bf16's, not fp32's, noise.
VerifyTolerance verify_tolerance(tensor::Precision precision);

// One element of one tensor: what the run and the replay changed it by.
struct ElementDiff {
  std::string tensor;
  std::int64_t index = -1;  // element within the tensor (the full unit-major layout)
  double run_delta = 0;     // final_run − initial
  double ref_delta = 0;     // final_replay − initial
  double bound = 0;         // allowed |run_delta − ref_delta|
  bool zero_grad = false;   // a key-bias element: exact gradient 0, noise-bounded
  // In UpdateCheck (tensors and worst): about the element's whole tensor.
  std::int64_t over_bound = 0;  // elements of the tensor over their bound
  std::int64_t elements = 0;    // elements in the tensor
  bool fails = false;           // the tensor fails the check (one of UpdateCheck::failures)
  double ratio() const;     // |run_delta − ref_delta| / bound (> 1: fails)
  nlohmann::json to_json() const;
};

struct UpdateCheck {
  std::vector<ElementDiff> tensors;  // the worst element of every tensor, layout order
  ElementDiff worst;                 // the worst element overall
  std::vector<std::string> failures;
  bool pass() const { return failures.empty(); }
};

// The largest |Δ| AdamW's rounding noise can give an element whose exact
// gradient is 0, after updates with learning rates `lrs` (one per applied
// step): Σ_t lr_t·ρ_t, ρ_t = the bound on |m̂_t| / √v̂_t for any gradients
// (Cauchy–Schwarz over the moment sums; ρ_1 = 1, ≈ 1 for small t).
double zero_gradient_update_bound(std::span<const double> lrs, double beta1, double beta2);

// Whether element `index` of `spec` has an exact gradient of 0: the key part
// of qkv_b (a bias added to every key of a head shifts all of a query's
// scores equally, which softmax ignores).
bool zero_gradient_element(const model::TensorSpec& spec, std::int64_t index,
                           const model::GptConfig& config);

// The element check on three buffers of the full layout. Zero-gradient
// elements are allowed |Δrun − Δref| ≤ 2·zero_grad_bound (each is within
// ±zero_grad_bound); every other element the rtol/atol bound above, with the
// outlier allowance of VerifyTolerance.
UpdateCheck compare_updates(const model::ParameterLayout& full, std::span<const float> initial,
                            std::span<const float> run, std::span<const float> ref,
                            const VerifyTolerance& tolerance, double zero_grad_bound);

// A per-step scalar (loss, grad_norm) of the run against the replay.
struct ScalarDiff {
  std::int64_t step = -1;
  double run = 0;
  double replay = 0;
  double rel_diff() const;  // |run − replay| / |replay|
};

struct ScalarCheck {
  std::vector<ScalarDiff> steps;  // every compared step
  ScalarDiff worst;               // largest rel_diff
  double max_abs_diff = 0;
  std::int64_t failed = 0;        // steps over the tolerance
  nlohmann::json to_json(bool per_step) const;
};

// One check that fails with messages, or was not run (with the reason).
struct CheckResult {
  bool checked = true;
  std::string note;  // why not checked / what was incomplete
  std::vector<std::string> failures;
  nlohmann::json details = nlohmann::json::object();
  bool pass() const { return failures.empty(); }
  nlohmann::json to_json() const;
};

// Rows of schedule.jsonl and metrics.jsonl against the steps and samples the
// configuration gives (`expected[s]` = the samples of step s).
CheckResult check_samples(const std::vector<std::vector<std::int64_t>>& expected,
                          const std::vector<std::int64_t>& expected_epochs,
                          const std::vector<nlohmann::json>& schedule,
                          const std::vector<nlohmann::json>& metrics);

// hashes/rank-<r>.json of `run_dir` (state_hash.h): same step (= steps − 1)
// everywhere, every unit's holders identical across replicas, one replicated
// hash, every unit held exactly once per replica; with `pp` pipeline stages,
// all of it per stage, and a file of a stage outside [0, pp) fails. Not
// checked without hashes/.
CheckResult check_holders(const std::filesystem::path& run_dir, std::int64_t steps,
                          const model::GptConfig& config, std::int64_t pp = 1);

struct VerifyResult {
  bool pass = false;
  VerifyTolerance tolerance;  // what the run was judged by
  std::int64_t steps = 0;
  std::vector<std::int64_t> skipped_steps;  // replayed without their update
  UpdateCheck updates;
  ScalarCheck loss;
  ScalarCheck grad_norm;
  CheckResult samples;
  CheckResult holders;
  std::vector<std::string> failures;  // every check's: samples, loss and grad_norm, holders, updates

  // The line of `ntp train --verify` and the `verify` event: "verify",
  // "steps", "max_loss_abs_diff", "max_loss_rel_diff", "max_grad_norm_rel_diff",
  // "worst_update" (tensor, index, both deltas, bound, ratio), "samples",
  // "holders" ("pass" / "fail" / "not checked: why") and "failures" (the
  // first ten). `detail` adds the worst element of every tensor ("tensors"),
  // the per-step scalars and the checks' details.
  nlohmann::json to_json(bool detail = false) const;
};

// The verdict in one line for people, what `ntp train --verify` and `ntp
// verify` print (the JSON only with --json, and always in verify.json):
//   verify: pass — 30 steps, 4 checks, worst update 2.5× its bound on 1 of
//     589,824 elements of h0.fc2_wt, within the 0.1 % allowance
//   verify: FAIL — 30 steps, 2 of 4 checks failed (loss and grad norm,
//     updates): step 1: loss 5.48857 in metrics.jsonl, ...; 17 more failures in
//     verify.json
// A failure is the first failing check's first message (it names the step,
// sample, rank, unit or tensor); an update failure is told in short.
std::string verdict_line(const VerifyResult& result);

// A tensor's class in verify.json's worst_by_class: "embedding" (wte, wpe),
// "norm" (LayerNorm weights and biases), "bias", or "weight" (the matrices).
std::string tensor_class(const std::string& name);

// RUN_DIR/verify.json: the result in full (to_json(true)), pretty-printed.
// Throws std::runtime_error naming the file when it cannot be written.
inline constexpr const char* kVerifyFile = "verify.json";
void write_verify_json(const std::filesystem::path& run_dir, const VerifyResult& result);

// Thrown by verify_run when `stop` asks it to end (a Ctrl-C during the
// replay); says at which step of how many.
class VerifyInterrupted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws VerifyInputError naming the run file that is missing or malformed.
// `stop`, polled before each replayed step, ends the replay early.
// Without a tolerance, the run's model.precision picks it (verify_tolerance).
VerifyResult verify_run(const std::filesystem::path& run_dir,
                        const std::optional<VerifyTolerance>& tolerance = std::nullopt,
                        const std::function<bool()>& stop = {});

}  // namespace ntp::train
