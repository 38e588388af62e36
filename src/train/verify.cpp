#include "train/verify.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "model/llmc_checkpoint.h"
#include "model/model_file.h"
#include "train/local_trainer.h"
#include "train/run_dir.h"
#include "train/schedule.h"
#include "train/state_hash.h"

namespace ntp::train {
namespace {

constexpr std::size_t kFailuresInLine = 10;

double rel_or_abs(double diff, double reference) {
  return reference != 0 ? diff / std::abs(reference) : diff;
}

std::string g(double x) { return fmt::format("{:.6g}", x); }

}  // namespace

// ---------------------------------------------------------------- updates ---

double ElementDiff::ratio() const {
  const double diff = std::abs(run_delta - ref_delta);
  if (diff == 0) return 0;
  return bound > 0 ? diff / bound : std::numeric_limits<double>::infinity();
}

nlohmann::json ElementDiff::to_json() const {
  const double r = ratio();
  return {{"tensor", tensor},       {"index", index}, {"run_delta", run_delta},
          {"ref_delta", ref_delta}, {"bound", bound}, {"ratio", std::isfinite(r) ? r : 1e308},
          {"zero_grad", zero_grad},        {"over_bound", over_bound}, {"elements", elements}};
}

double zero_gradient_update_bound(std::span<const double> lrs, double beta1, double beta2) {
  if (beta2 <= 0) return std::numeric_limits<double>::infinity();
  // m_t = (1-β1) Σ β1^(t-s) g_s, v_t = (1-β2) Σ β2^(t-s) g_s². Cauchy–Schwarz with
  // weights β2^((t-s)/2): |Σ β1^(t-s) g_s| ≤ √(Σ_k (β1²/β2)^k) · √(v_t / (1-β2)), so
  // |m̂_t| / √v̂_t ≤ (1-β1)/(1-β1^t) · √((1-β2^t)/(1-β2)) · √(Σ_{k<t} (β1²/β2)^k).
  double bound = 0;
  double series = 0;
  for (std::size_t i = 0; i < lrs.size(); ++i) {
    const double t = static_cast<double>(i + 1);
    series += std::pow(beta1 * beta1 / beta2, static_cast<double>(i));
    const double rho = (1 - beta1) / (1 - std::pow(beta1, t)) *
                       std::sqrt((1 - std::pow(beta2, t)) / (1 - beta2)) * std::sqrt(series);
    bound += std::abs(lrs[i]) * rho;
  }
  return bound;
}

bool zero_gradient_element(const model::TensorSpec& spec, std::int64_t index,
                           const model::GptConfig& config) {
  const std::string suffix = ".qkv_b";
  if (spec.kind != model::UnitKind::kHead || spec.name.size() < suffix.size() ||
      spec.name.compare(spec.name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  const std::int64_t hd = config.head_dim();
  const std::int64_t within = index % spec.unit_size;  // unit = [q (hd), k (hd), v (hd)]
  return within >= hd && within < 2 * hd;
}

UpdateCheck compare_updates(const model::ParameterLayout& full, std::span<const float> initial,
                            std::span<const float> run, std::span<const float> ref,
                            const VerifyTolerance& tolerance, double zero_grad_bound) {
  UpdateCheck out;
  // float rounding of the bound itself: a zero-gradient element at exactly
  // ±bound in both runs must pass.
  const double zero_grad_allowed = 2 * zero_grad_bound * (1 + 1e-4);
  for (const model::TensorSpec& spec : full.tensors()) {
    const auto delta = [&](std::span<const float> x, std::int64_t i) {
      const auto k = static_cast<std::size_t>(spec.offset + i);
      return static_cast<double>(x[k]) - static_cast<double>(initial[k]);
    };
    double sq = 0;
    std::int64_t counted = 0;
    for (std::int64_t i = 0; i < spec.count; ++i) {
      if (zero_gradient_element(spec, i, full.config())) continue;
      sq += delta(ref, i) * delta(ref, i);
      ++counted;
    }
    const double atol = tolerance.update_atol_rms * (counted > 0 ? std::sqrt(sq / static_cast<double>(counted)) : 0);
    ElementDiff worst{spec.name, -1, 0, 0, atol, false};
    std::int64_t failing = 0;
    bool nan = false;
    bool beyond_cap = false;  // an outlier further off than noise can move any element
    for (std::int64_t i = 0; i < spec.count; ++i) {
      ElementDiff e{spec.name, i, delta(run, i), delta(ref, i), 0, zero_gradient_element(spec, i, full.config())};
      e.bound = e.zero_grad ? zero_grad_allowed : tolerance.update_rtol * std::abs(e.ref_delta) + atol;
      const double r = e.ratio();
      nan = nan || std::isnan(e.run_delta);
      if (r > 1 || std::isnan(e.run_delta)) ++failing;
      // An element whose gradient cancels to about zero moves by AdamW's
      // noise, like a key bias: at most zero_grad_allowed, whatever its tensor.
      const double diff = std::abs(e.run_delta - e.ref_delta);
      beyond_cap = beyond_cap || diff > std::max(tolerance.update_outlier_ratio * e.bound, zero_grad_allowed);
      if (worst.index < 0 || r > worst.ratio() || std::isnan(e.run_delta)) worst = e;
    }
    worst.over_bound = failing;
    worst.elements = spec.count;
    const auto allowed = static_cast<std::int64_t>(static_cast<double>(spec.count) * tolerance.update_outlier_fraction);
    worst.fails = nan || failing > allowed || beyond_cap;
    if (worst.fails) {
      out.failures.push_back(fmt::format(
          "{}: {} of {} elements changed differently from the replay ({} allowed, each within {}x or AdamW's noise); "
          "worst element "
          "{}: {} in the run, {} in the replay (|diff| {} > bound {}{})",
          spec.name, failing, spec.count, allowed, tolerance.update_outlier_ratio, worst.index, g(worst.run_delta),
          g(worst.ref_delta), g(std::abs(worst.run_delta - worst.ref_delta)), g(worst.bound),
          worst.zero_grad ? ", a key bias: zero gradient, noise-bounded" : ""));
    }
    if (out.worst.index < 0 || worst.ratio() > out.worst.ratio()) out.worst = worst;
    out.tensors.push_back(std::move(worst));
  }
  return out;
}

// ---------------------------------------------------------------- scalars ---

double ScalarDiff::rel_diff() const { return rel_or_abs(std::abs(run - replay), replay); }

nlohmann::json ScalarCheck::to_json(bool per_step) const {
  nlohmann::json j = {{"max_rel_diff", worst.rel_diff()},
                      {"max_abs_diff", max_abs_diff},
                      {"worst_step", worst.step}};
  if (per_step) {
    nlohmann::json list = nlohmann::json::array();
    for (const ScalarDiff& d : steps) list.push_back({{"step", d.step}, {"run", d.run}, {"replay", d.replay}});
    j["steps"] = std::move(list);
  }
  return j;
}

nlohmann::json CheckResult::to_json() const {
  nlohmann::json j = {{"result", !checked ? "not checked" : pass() ? "pass" : "fail"},
                      {"failures", failures}};
  if (!note.empty()) j["note"] = note;
  if (!details.empty()) j["details"] = details;
  return j;
}

// ---------------------------------------------------------------- samples ---

namespace {

// One row per step 0..steps-1, in order, in `rows` of `file`. Returns, per
// step, the first row that has it (-1: none).
std::vector<std::ptrdiff_t> check_step_rows(const std::string& file, const std::vector<nlohmann::json>& rows,
                                            std::int64_t steps, std::vector<std::string>& failures) {
  std::vector<std::ptrdiff_t> row_of(static_cast<std::size_t>(steps), -1);
  std::map<std::int64_t, int> seen;
  std::int64_t previous = -1;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::int64_t step = rows[i].at("step").get<std::int64_t>();
    if (step < 0 || step >= steps) {
      failures.push_back(fmt::format("{}: row {} has step {}, outside 0..{}", file, i + 1, step, steps - 1));
      continue;
    }
    if (++seen[step] == 2) failures.push_back(fmt::format("{}: step {} appears more than once", file, step));
    if (step < previous && seen[step] == 1) {
      failures.push_back(fmt::format("{}: step {} out of order (row {}, after step {})", file, step, i + 1, previous));
    }
    previous = std::max(previous, step);
    auto& row = row_of[static_cast<std::size_t>(step)];
    if (row < 0) row = static_cast<std::ptrdiff_t>(i);
  }
  for (std::int64_t s = 0; s < steps; ++s) {
    if (row_of[static_cast<std::size_t>(s)] < 0) failures.push_back(fmt::format("{}: step {} missing", file, s));
  }
  return row_of;
}

}  // namespace

CheckResult check_samples(const std::vector<std::vector<std::int64_t>>& expected,
                          const std::vector<std::int64_t>& expected_epochs,
                          const std::vector<nlohmann::json>& schedule,
                          const std::vector<nlohmann::json>& metrics) {
  CheckResult out;
  const auto steps = static_cast<std::int64_t>(expected.size());
  const std::vector<std::ptrdiff_t> row_of = check_step_rows("schedule.jsonl", schedule, steps, out.failures);
  check_step_rows("metrics.jsonl", metrics, steps, out.failures);
  for (std::int64_t s = 0; s < steps; ++s) {
    const std::ptrdiff_t row = row_of[static_cast<std::size_t>(s)];
    if (row < 0) continue;
    const nlohmann::json& r = schedule[static_cast<std::size_t>(row)];
    const std::int64_t epoch = r.at("epoch").get<std::int64_t>();
    if (epoch != expected_epochs[static_cast<std::size_t>(s)]) {
      out.failures.push_back(fmt::format("schedule.jsonl: step {} has epoch {}, the schedule gives {}", s, epoch,
                                         expected_epochs[static_cast<std::size_t>(s)]));
    }
    std::map<std::int64_t, int> logged;
    for (const auto& replica : r.at("samples").get<std::vector<std::vector<std::int64_t>>>()) {
      for (std::int64_t id : replica) ++logged[id];
    }
    const std::set<std::int64_t> want(expected[static_cast<std::size_t>(s)].begin(),
                                      expected[static_cast<std::size_t>(s)].end());
    for (const auto& [id, count] : logged) {
      if (!want.contains(id)) {
        out.failures.push_back(fmt::format("schedule.jsonl: step {}: sample {} is not in the step's batch", s, id));
      } else if (count > 1) {
        out.failures.push_back(fmt::format("schedule.jsonl: step {}: sample {} trained {} times", s, id, count));
      }
    }
    for (std::int64_t id : want) {
      if (!logged.contains(id)) {
        out.failures.push_back(fmt::format("schedule.jsonl: step {}: sample {} of the step's batch not trained", s, id));
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------- holders ---

namespace {

struct HashFile {
  std::string name;  // "hashes/rank-3.json"
  std::int64_t rank = -1, replica = -1, slot = -1, step = -1, epoch = -1;
  std::int64_t stage = 0;  // pipeline stage (files without one: 0)
  StateHashes hashes;
};

std::string ranks_text(const std::vector<std::int64_t>& ranks) {
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ", "));
}

// "ranks 0, 4 hold 0123...; rank 5 holds abcd..." for holders that disagree.
std::string disagreement(const std::map<std::uint64_t, std::vector<std::int64_t>>& by_hash) {
  std::vector<std::string> parts;
  for (const auto& [hash, ranks] : by_hash) {
    parts.push_back(fmt::format("{} {} {:016x}", ranks_text(ranks), ranks.size() == 1 ? "holds" : "hold", hash));
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

}  // namespace

CheckResult check_holders(const std::filesystem::path& run_dir, std::int64_t steps,
                          const model::GptConfig& config, std::int64_t pp) {
  CheckResult out;
  const std::filesystem::path dir = run_dir / "hashes";
  if (!std::filesystem::is_directory(dir)) {
    out.checked = false;
    out.note = "no hashes/ in the run directory (a single-process run, or a trainer that does not write them)";
    return out;
  }
  std::vector<HashFile> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("rank-") || entry.path().extension() != ".json") continue;
    HashFile f;
    f.name = "hashes/" + name;
    try {
      const std::vector<nlohmann::json> lines = read_jsonl(entry.path());
      if (lines.size() != 1) throw std::runtime_error("expected one JSON object");
      const nlohmann::json& j = lines[0];
      f.rank = j.at("rank").get<std::int64_t>();
      f.replica = j.at("replica").get<std::int64_t>();
      f.slot = j.at("slot").get<std::int64_t>();
      f.stage = j.value("stage", std::int64_t{0});
      f.step = j.at("step").get<std::int64_t>();
      f.epoch = j.at("epoch").get<std::int64_t>();
      f.hashes = StateHashes::from_json(j);
    } catch (const std::exception& e) {
      throw VerifyInputError(fmt::format("{}: {}", (run_dir / f.name).string(), e.what()));
    }
    files.push_back(std::move(f));
  }
  std::sort(files.begin(), files.end(), [](const HashFile& a, const HashFile& b) { return a.rank < b.rank; });
  if (files.empty()) {
    out.failures.push_back("hashes/: no rank-<r>.json files");
    return out;
  }
  // A rank lost after it wrote its file (during the end's barrier) left the
  // file of an older epoch: the survivors recovered and hold its units now.
  // Only the last epoch's files describe the final state.
  std::int64_t last_epoch = -1;
  for (const HashFile& f : files) last_epoch = std::max(last_epoch, f.epoch);
  std::vector<std::string> older;
  for (const HashFile& f : files) {
    if (f.epoch < last_epoch) older.push_back(fmt::format("{} (epoch {})", f.name, f.epoch));
  }
  std::erase_if(files, [&](const HashFile& f) { return f.epoch < last_epoch; });
  for (const HashFile& f : files) {
    if (f.step != steps - 1) {
      out.failures.push_back(fmt::format("{}: rank {} ends at step {}, the run's last step is {}", f.name, f.rank,
                                         f.step, steps - 1));
    }
  }
  // Each pipeline stage holds its own blocks: units and replicated tensors
  // are compared within a stage. GPT-2's last stage holds a copy of the
  // first stage's wte (its vocabulary units hold nothing else), which must
  // stay equal to it: those compare with the first stage's.
  const std::int64_t stages = pp;
  for (const HashFile& f : files) {
    if (f.stage < 0 || f.stage >= pp) {
      out.failures.push_back(fmt::format("{}: rank {} names stage {}, the run has {} (parallel.pp)", f.name, f.rank,
                                         f.stage, pp));
    }
  }
  std::erase_if(files, [&](const HashFile& f) { return f.stage < 0 || f.stage >= pp; });
  const auto in_stage = [&](std::int64_t stage) { return stages > 1 ? fmt::format("stage {} ", stage) : std::string(); };
  const auto compared_with = [&](std::size_t kind, std::int64_t stage) {
    const bool tied_copy = !config.llama() && kShardedKinds[kind] == model::UnitKind::kVocab && stage == stages - 1;
    return tied_copy ? std::int64_t{0} : stage;
  };
  std::map<std::int64_t, std::map<std::uint64_t, std::vector<std::int64_t>>> replicated;  // stage -> hash -> ranks
  for (const HashFile& f : files) replicated[f.stage][f.hashes.replicated].push_back(f.rank);
  for (const auto& [stage, by_hash] : replicated) {
    if (by_hash.size() > 1) out.failures.push_back(in_stage(stage) + "replicated tensors differ: " + disagreement(by_hash));
  }

  const std::array<std::int64_t, 3> unit_count = {config.head_units(), config.ffn(), config.padded_vocab};
  std::map<std::int64_t, std::vector<std::int64_t>> replica_ranks;
  for (const HashFile& f : files) replica_ranks[f.replica].push_back(f.rank);
  std::set<std::int64_t> complete;
  for (const auto& [replica, ranks] : replica_ranks) complete.insert(replica);
  std::vector<std::string> incomplete;
  for (std::size_t k = 0; k < kShardedKinds.size(); ++k) {
    const char* kind = kind_key(kShardedKinds[k]);
    // (stage compared in, unit) -> hash -> ranks
    std::map<std::pair<std::int64_t, std::int64_t>, std::map<std::uint64_t, std::vector<std::int64_t>>> holders;
    // (replica, stage) -> unit -> ranks
    std::map<std::pair<std::int64_t, std::int64_t>, std::map<std::int64_t, std::vector<std::int64_t>>> per_stage;
    for (const HashFile& f : files) {
      for (const auto& [unit, hash] : f.hashes.units[k]) {
        if (unit < 0 || unit >= unit_count[k]) {
          out.failures.push_back(fmt::format("{}: {} unit {} outside 0..{}", f.name, kind, unit, unit_count[k] - 1));
          continue;
        }
        holders[{compared_with(k, f.stage), unit}][hash].push_back(f.rank);
        per_stage[{f.replica, f.stage}][unit].push_back(f.rank);
      }
    }
    for (const auto& [at, by_hash] : holders) {
      if (by_hash.size() > 1) {
        out.failures.push_back(
            fmt::format("{}{} unit {}: holders differ: {}", in_stage(at.first), kind, at.second, disagreement(by_hash)));
      }
    }
    for (const auto& [replica, ranks] : replica_ranks) {
      for (std::int64_t stage = 0; stage < stages; ++stage) {
        const auto& units = per_stage[{replica, stage}];
        std::vector<std::int64_t> missing;
        for (std::int64_t u = 0; u < unit_count[k]; ++u) {
          const auto it = units.find(u);
          if (it == units.end()) {
            missing.push_back(u);
          } else if (it->second.size() > 1) {
            out.failures.push_back(fmt::format("replica {}: {}{} unit {} held by {}", replica, in_stage(stage), kind, u,
                                               ranks_text(it->second)));
          }
        }
        if (!missing.empty()) {
          complete.erase(replica);
          incomplete.push_back(fmt::format("replica {} ({}): {} of {} {}{} units in no hash file (first: {}); a rank "
                                           "of the replica did not finish?",
                                           replica, ranks_text(ranks), missing.size(), unit_count[k], in_stage(stage),
                                           kind, missing[0]));
        }
      }
    }
  }
  if (!incomplete.empty()) out.note = fmt::format("{}", fmt::join(incomplete, "; "));
  if (complete.empty()) out.failures.push_back("no replica has a hash for every unit: " + out.note);
  if (!older.empty()) {
    const std::string left_out =
        fmt::format("left out, from before the last recovery (epoch {}): {}", last_epoch, fmt::join(older, ", "));
    out.note = out.note.empty() ? left_out : out.note + "; " + left_out;
  }
  out.details = {{"ranks", files.size()},
                 {"replicas", replica_ranks.size()},
                 {"complete_replicas", std::vector<std::int64_t>(complete.begin(), complete.end())},
                 {"left_out", older}};
  return out;
}

// ------------------------------------------------------------------ result ---

std::string tensor_class(const std::string& name) {
  const std::string leaf = name.substr(name.find('.') == std::string::npos ? 0 : name.find('.') + 1);
  if (leaf == "wte" || leaf == "wpe") return "embedding";
  if (leaf.starts_with("ln")) return "norm";
  if (leaf.ends_with("_b")) return "bias";
  return "weight";
}

namespace {

// The worst element of each tensor class, as a ratio to its bound.
nlohmann::json worst_by_class(const std::vector<ElementDiff>& tensors) {
  std::map<std::string, const ElementDiff*> worst;
  for (const ElementDiff& e : tensors) {
    const ElementDiff*& w = worst[tensor_class(e.tensor)];
    if (w == nullptr || e.ratio() > w->ratio()) w = &e;
  }
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, e] : worst) {
    out[name] = {{"tensor", e->tensor}, {"index", e->index}, {"ratio", e->ratio()}};
  }
  return out;
}

}  // namespace

nlohmann::json VerifyResult::to_json(bool detail) const {
  const auto check_text = [](const CheckResult& c) {
    return !c.checked ? "not checked: " + c.note : c.pass() ? std::string("pass") : std::string("fail");
  };
  nlohmann::json j = {
      {"verify", pass ? "pass" : "fail"},
      {"steps", steps},
      {"max_loss_abs_diff", loss.max_abs_diff},
      {"max_loss_rel_diff", loss.worst.rel_diff()},
      {"max_grad_norm_rel_diff", grad_norm.worst.rel_diff()},
      {"worst_update", updates.worst.to_json()},
      {"worst_by_class", worst_by_class(updates.tensors)},
      {"samples", check_text(samples)},
      {"holders", check_text(holders)},
      {"failures", std::vector<std::string>(failures.begin(),
                                            failures.begin() + static_cast<std::ptrdiff_t>(
                                                                   std::min(failures.size(), kFailuresInLine)))}};
  if (failures.size() > kFailuresInLine) j["more_failures"] = failures.size() - kFailuresInLine;
  if (!skipped_steps.empty()) j["skipped_steps"] = skipped_steps;
  if (detail) {
    nlohmann::json tensors = nlohmann::json::array();
    for (const ElementDiff& e : updates.tensors) tensors.push_back(e.to_json());
    j["tensors"] = std::move(tensors);
    j["loss"] = loss.to_json(true);
    j["grad_norm"] = grad_norm.to_json(true);
    j["sample_check"] = samples.to_json();
    j["holder_check"] = holders.to_json();
    j["failures"] = failures;
    j.erase("more_failures");
  }
  return j;
}

// ----------------------------------------------------------------- verdict ---

namespace {

// 589824 -> "589,824"
std::string thousands(std::int64_t n) {
  const std::string digits = std::to_string(n);
  const std::size_t sign = n < 0 ? 1 : 0;
  std::string out = digits.substr(0, sign);
  for (std::size_t i = sign; i < digits.size(); ++i) {
    if (i > sign && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string times(double ratio) { return fmt::format("{:.3g}×", ratio); }

std::string count_of(std::int64_t n, const char* one, const char* many) {
  return fmt::format("{} {}", thousands(n), n == 1 ? one : many);
}

// "worst update 2.5× its bound on 1 of 589,824 elements of h0.fc2_wt, within
// the 0.1 % allowance" (a passing update check).
std::string worst_update_text(const UpdateCheck& updates, const VerifyTolerance& tolerance) {
  const ElementDiff& w = updates.worst;
  if (w.ratio() == 0) return "every update exactly the replay's";
  if (w.over_bound == 0) return fmt::format("worst update {} its bound, in {}", times(w.ratio()), w.tensor);
  std::string s = w.over_bound == 1
                      ? fmt::format("worst update {} its bound on 1 of {} elements of {}", times(w.ratio()),
                                    thousands(w.elements), w.tensor)
                      : fmt::format("worst update {} its bound, {} of {} elements of {} over it", times(w.ratio()),
                                    thousands(w.over_bound), thousands(w.elements), w.tensor);
  s += fmt::format(", within the {:g} % allowance", 100 * tolerance.update_outlier_fraction);
  const auto others = std::count_if(updates.tensors.begin(), updates.tensors.end(), [&](const ElementDiff& e) {
    return e.over_bound > 0 && e.tensor != w.tensor;
  });
  if (others > 0) s += fmt::format(" (as are the outliers of {})", count_of(others, "other tensor", "other tensors"));
  return s;
}

// "h0.fc2_wt: 5,000 of 589,824 elements over their bound (589 allowed), worst
// 12× at element 17" (the first failing tensor).
std::string update_failure_text(const UpdateCheck& updates, const VerifyTolerance& tolerance) {
  const auto it = std::find_if(updates.tensors.begin(), updates.tensors.end(),
                               [](const ElementDiff& e) { return e.fails; });
  if (it == updates.tensors.end()) return updates.failures.empty() ? "" : updates.failures.front();
  const ElementDiff& e = *it;
  const auto allowed = static_cast<std::int64_t>(static_cast<double>(e.elements) * tolerance.update_outlier_fraction);
  std::string s = fmt::format("{}: {} of {} elements over their bound ({} allowed", e.tensor, thousands(e.over_bound),
                              thousands(e.elements), thousands(allowed));
  if (e.over_bound <= allowed) s += fmt::format(", each within {:g}× or AdamW's noise", tolerance.update_outlier_ratio);
  s += "), ";
  s += std::isnan(e.run_delta) ? fmt::format("element {} is NaN in the run", e.index)
                               : fmt::format("worst {} at element {}", times(e.ratio()), e.index);
  const auto others = std::count_if(it + 1, updates.tensors.end(), [](const ElementDiff& t) { return t.fails; });
  if (others > 0) s += fmt::format(" (and {})", count_of(others, "more tensor", "more tensors"));
  return s;
}

}  // namespace

std::string verdict_line(const VerifyResult& r) {
  // The checks in the order of VerifyResult::failures.
  struct Check {
    const char* name;
    bool run;
    bool failed;
  };
  const std::size_t scalar_failures = static_cast<std::size_t>(r.loss.failed + r.grad_norm.failed);
  const std::array<Check, 4> checks = {{
      {"samples", r.samples.checked, !r.samples.pass()},
      {"loss and grad norm", !r.loss.steps.empty() || !r.grad_norm.steps.empty(), scalar_failures > 0},
      {"holders", r.holders.checked, !r.holders.pass()},
      {"updates", !r.updates.tensors.empty(), !r.updates.pass()},
  }};
  std::vector<std::string> not_run, failed;
  for (const Check& c : checks) {
    if (!c.run) not_run.emplace_back(c.name);
    if (c.failed) failed.emplace_back(c.name);
  }
  const std::size_t run = checks.size() - not_run.size();
  std::string s = fmt::format("verify: {} — {}", r.pass ? "pass" : "FAIL", count_of(r.steps, "step", "steps"));
  if (!r.skipped_steps.empty()) s += fmt::format(" ({} without update)", r.skipped_steps.size());
  if (r.pass) {
    s += ", " + count_of(static_cast<std::int64_t>(run), "check", "checks");
    if (!not_run.empty()) s += fmt::format(" ({} not checked)", fmt::join(not_run, ", "));
    if (!r.updates.tensors.empty()) s += ", " + worst_update_text(r.updates, r.tolerance);
    return s;
  }
  s += fmt::format(", {} of {} failed ({})", failed.size(), count_of(static_cast<std::int64_t>(run), "check", "checks"),
                   fmt::join(failed, ", "));
  // The first failing check's first message (an update failure in short).
  std::string first;
  if (!r.samples.pass()) {
    first = r.samples.failures.front();
  } else if (scalar_failures > 0 && !r.failures.empty()) {
    first = r.failures.front();  // the samples' (none), then the scalars'
  } else if (!r.holders.pass()) {
    first = r.holders.failures.front();
  } else if (!r.updates.pass()) {
    first = update_failure_text(r.updates, r.tolerance);
  } else if (!r.failures.empty()) {
    first = r.failures.front();
  }
  if (!first.empty()) s += ": " + first;
  if (r.failures.size() > 1) {
    const auto more = static_cast<std::int64_t>(r.failures.size() - 1);
    s += fmt::format("; {} more {} in {}", thousands(more), more == 1 ? "failure" : "failures", kVerifyFile);
  }
  return s;
}

void write_verify_json(const std::filesystem::path& run_dir, const VerifyResult& result) {
  const std::filesystem::path path = run_dir / kVerifyFile;
  const std::filesystem::path partial = run_dir / (std::string(kVerifyFile) + ".partial");
  {
    std::ofstream out(partial, std::ios::trunc);
    out << result.to_json(true).dump(2) << "\n";
    if (!out) throw std::runtime_error(fmt::format("{}: cannot write", partial.string()));
  }
  std::error_code ec;
  std::filesystem::rename(partial, path, ec);  // whole or not at all
  if (ec) throw std::runtime_error(fmt::format("{}: {}", path.string(), ec.message()));
}

// ------------------------------------------------------------------ replay ---

namespace {

// metrics.jsonl fields the check reads; a skipped step's loss may be null.
struct LoggedStep {
  std::int64_t step = -1;
  double loss = std::numeric_limits<double>::quiet_NaN();
  double grad_norm = std::numeric_limits<double>::quiet_NaN();
  bool skipped = false;
};

LoggedStep logged_step(const nlohmann::json& row) {
  LoggedStep m;
  m.step = row.at("step").get<std::int64_t>();
  if (row.contains("loss") && row["loss"].is_number()) m.loss = row["loss"].get<double>();
  if (row.contains("grad_norm") && row["grad_norm"].is_number()) m.grad_norm = row["grad_norm"].get<double>();
  m.skipped = row.value("skipped", false);
  return m;
}

void compare_scalar(const char* name, std::int64_t step, double run, double replay, double rel_tolerance,
                    ScalarCheck& check, std::vector<std::string>& failures) {
  const ScalarDiff d{step, run, replay};
  check.steps.push_back(d);
  if (check.worst.step < 0 || !(d.rel_diff() <= check.worst.rel_diff())) check.worst = d;
  check.max_abs_diff = std::max(check.max_abs_diff, std::abs(run - replay));
  if (!(d.rel_diff() <= rel_tolerance)) {
    ++check.failed;
    failures.push_back(fmt::format("step {}: {} {} in metrics.jsonl, {} in the replay (relative diff {:.3g} > {:.0e})",
                                   step, name, g(run), g(replay), d.rel_diff(), rel_tolerance));
  }
}

}  // namespace

VerifyTolerance verify_tolerance(tensor::Precision precision) {
  VerifyTolerance t;
  if (precision == tensor::Precision::kFp32) return t;
  // docs/train.md, "Tolerances under bf16": 2·u_bf16 (u_bf16 = 2⁻⁸) of an
  // update and of the tensor's rms; 1 % of a tensor's elements may be
  // outliers (cancelling gradients, ~10x more than in fp32); the scalars
  // about 10x over the noise measured after 10 steps.
  t.update_rtol = 1e-2;
  t.update_atol_rms = 1e-2;
  t.update_outlier_fraction = 1e-2;
  t.update_outlier_ratio = 10;
  t.loss_rel = 1e-4;
  t.grad_norm_rel = 1e-3;
  return t;
}

VerifyResult verify_run(const std::filesystem::path& run_dir, const std::optional<VerifyTolerance>& chosen,
                        const std::function<bool()>& stop) {
  if (!std::filesystem::is_directory(run_dir)) {
    throw VerifyInputError(fmt::format("{}: not a run directory", run_dir.string()));
  }
  std::vector<std::string> missing;
  for (const char* name : {"config.toml", "metrics.jsonl", "schedule.jsonl", "model.bin"}) {
    if (!std::filesystem::is_regular_file(run_dir / name)) missing.push_back((run_dir / name).string());
  }
  if (!missing.empty()) throw VerifyInputError(fmt::format("missing run files: {}", fmt::join(missing, ", ")));
  Config config;
  std::vector<nlohmann::json> schedule_rows, metrics_rows;
  std::vector<LoggedStep> logged;
  model::LlmcCheckpoint trained;
  try {
    config = load_config((run_dir / "config.toml").string(), {});
    schedule_rows = read_jsonl(run_dir / "schedule.jsonl");
    metrics_rows = read_jsonl(run_dir / "metrics.jsonl");
    for (const nlohmann::json& row : metrics_rows) logged.push_back(logged_step(row));
    for (const nlohmann::json& row : schedule_rows) {
      row.at("step").get<std::int64_t>();
      row.at("epoch").get<std::int64_t>();
      row.at("samples").get<std::vector<std::vector<std::int64_t>>>();
    }
    trained = model::read_model_file((run_dir / "model.bin").string());
  } catch (const nlohmann::json::exception& e) {
    throw VerifyInputError(fmt::format("{}: malformed row in metrics.jsonl or schedule.jsonl: {}", run_dir.string(), e.what()));
  } catch (const std::runtime_error& e) {
    throw VerifyInputError(e.what());
  }

  const VerifyTolerance tolerance = chosen.value_or(verify_tolerance(config.model.precision));
  LocalTrainer reference(config, run_dir, TrainerRole::kReference);  // on the CPU, whatever model.device
  const std::vector<float> initial(reference.params().begin(), reference.params().end());
  if (trained.params.size() != initial.size()) {
    throw VerifyInputError(fmt::format("{}: does not match the run's model ({} parameters, expected {})",
                                       (run_dir / "model.bin").string(), trained.params.size(), initial.size()));
  }
  const std::int64_t steps = config.train.steps;
  const SampleSchedule schedule = reference.plan().schedule();
  std::vector<std::vector<std::int64_t>> expected;
  std::vector<std::int64_t> expected_epochs;
  for (std::int64_t s = 0; s < steps; ++s) {
    expected.push_back(schedule.step_samples(s));
    expected_epochs.push_back(schedule.epoch_of(s));
  }

  VerifyResult result;
  result.tolerance = tolerance;
  result.samples = check_samples(expected, expected_epochs, schedule_rows, metrics_rows);
  std::map<std::int64_t, std::size_t> schedule_row, metrics_row;  // step -> first row
  for (std::size_t i = 0; i < schedule_rows.size(); ++i) schedule_row.emplace(schedule_rows[i].at("step").get<std::int64_t>(), i);
  for (std::size_t i = 0; i < logged.size(); ++i) metrics_row.emplace(logged[i].step, i);

  std::vector<std::string> scalar_failures;
  std::vector<double> applied_lrs;
  for (std::int64_t s = 0; s < steps; ++s) {
    if (stop && stop()) throw VerifyInterrupted(fmt::format("the replay stopped at step {} of {}", s, steps));
    // What the run logged it trained (the split only changes the micro-batch
    // boundaries); the config's batch when the row is missing.
    const auto row = schedule_row.find(s);
    const std::vector<std::vector<std::int64_t>> samples =
        row != schedule_row.end() ? schedule_rows[row->second].at("samples").get<std::vector<std::vector<std::int64_t>>>()
                                  : std::vector<std::vector<std::int64_t>>{expected[static_cast<std::size_t>(s)]};
    const auto m = metrics_row.find(s);
    const bool skipped = m != metrics_row.end() && logged[m->second].skipped;
    const StepMetrics replay = reference.step(s, samples, nullptr, skipped ? StepUpdate::kSkip : StepUpdate::kApply);
    ++result.steps;
    if (skipped) {
      result.skipped_steps.push_back(s);
      continue;
    }
    applied_lrs.push_back(replay.lr);
    if (m == metrics_row.end()) continue;
    compare_scalar("loss", s, logged[m->second].loss, replay.loss, tolerance.loss_rel, result.loss, scalar_failures);
    compare_scalar("grad_norm", s, logged[m->second].grad_norm, replay.grad_norm, tolerance.grad_norm_rel,
                   result.grad_norm, scalar_failures);
  }

  const model::ParameterLayout full(reference.setup().gpt, model::Shard::full(reference.setup().gpt));
  const double zero_grad_bound =
      zero_gradient_update_bound(applied_lrs, config.train.beta1, config.train.beta2);
  result.updates = compare_updates(full, initial, trained.params, reference.params(), tolerance, zero_grad_bound);
  result.holders = check_holders(run_dir, steps, reference.setup().gpt, config.parallel.pp);

  // The most specific first (output lists may be cut short): the samples,
  // the per-step scalars, the holders, then the tensors.
  for (const auto* list : {&result.samples.failures, &scalar_failures, &result.holders.failures, &result.updates.failures}) {
    result.failures.insert(result.failures.end(), list->begin(), list->end());
  }
  result.pass = result.failures.empty();
  return result;
}

}  // namespace ntp::train
