#include "train/metrics.h"

#include <limits>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace ntp::train {
namespace {

template <class T>
T field(const nlohmann::json& j, const char* name) {
  if (!j.contains(name)) throw std::runtime_error(fmt::format("metrics: missing field '{}'", name));
  try {
    return j.at(name).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw std::runtime_error(fmt::format("metrics: field '{}' has the wrong type", name));
  }
}

std::string si(double value) {
  if (value >= 1e6) return fmt::format("{:.1f}M", value / 1e6);
  if (value >= 1e3) return fmt::format("{:.1f}k", value / 1e3);
  return fmt::format("{:.0f}", value);
}

// JSON has no NaN or infinity: a non-finite value is written as null (by
// nlohmann::json) and read back as NaN.
double finite_or_nan(const nlohmann::json& j, const char* name) {
  if (j.contains(name) && j.at(name).is_null()) return std::numeric_limits<double>::quiet_NaN();
  return field<double>(j, name);
}

}  // namespace

std::optional<double> StepClock::commit(std::int64_t step, std::uint64_t epoch, double now) {
  const bool follows = step_ >= 0 && step == step_ + 1 && epoch == epoch_;
  const double interval = now - at_ - off_s_;
  step_ = step;
  epoch_ = epoch;
  at_ = now;
  off_s_ = 0.0;
  if (!follows) return std::nullopt;
  return std::max(interval, 0.0);
}

nlohmann::json to_json(const StepMetrics& m) {
  nlohmann::json j = {{"step", m.step},
          {"epoch", m.epoch},
          {"loss", m.loss},
          {"lr", m.lr},
          {"grad_norm", m.grad_norm},
          {"tokens", m.tokens},
          {"samples", m.samples},
          {"tp", m.tp},
          {"step_time_s", m.step_time_s},
          {"exposed_sync_s", m.exposed_sync_s},
          {"sync_wait_max_s", m.sync_wait_max_s},
          {"reshard_bytes", m.reshard_bytes},
          {"allreduce_bytes", m.allreduce_bytes}};
  if (m.skipped) j["skipped"] = true;
  if (m.val_loss) j["val_loss"] = *m.val_loss;
  if (m.time > 0) j["time"] = m.time;
  if (m.power.empty()) return j;
  j["power"] = nlohmann::json::array();
  for (const ReplicaPower& p : m.power) j["power"].push_back({{"limit_w", p.limit_w}, {"speedup", p.speedup}});
  return j;
}

StepMetrics step_metrics_from_json(const nlohmann::json& j) {
  StepMetrics m;
  m.step = field<std::int64_t>(j, "step");
  m.epoch = field<std::int64_t>(j, "epoch");
  m.loss = finite_or_nan(j, "loss");
  m.lr = field<double>(j, "lr");
  m.grad_norm = finite_or_nan(j, "grad_norm");
  m.tokens = field<std::int64_t>(j, "tokens");
  m.samples = field<std::vector<std::int64_t>>(j, "samples");
  m.tp = field<std::vector<std::int64_t>>(j, "tp");
  m.step_time_s = field<double>(j, "step_time_s");
  m.exposed_sync_s = field<double>(j, "exposed_sync_s");
  m.sync_wait_max_s = j.value("sync_wait_max_s", 0.0);  // absent in runs logged before it existed
  m.reshard_bytes = field<std::int64_t>(j, "reshard_bytes");
  m.allreduce_bytes = field<std::int64_t>(j, "allreduce_bytes");
  m.skipped = j.value("skipped", false);
  if (j.contains("val_loss")) m.val_loss = finite_or_nan(j, "val_loss");
  m.time = j.value("time", 0.0);
  if (!j.contains("power")) return m;
  for (const nlohmann::json& p : field<std::vector<nlohmann::json>>(j, "power")) {
    m.power.push_back({field<double>(p, "limit_w"), field<double>(p, "speedup")});
  }
  return m;
}

nlohmann::json summarize(const std::vector<StepMetrics>& steps, double wall_s) {
  nlohmann::json s = {{"steps", steps.size()}, {"wall_s", wall_s}};
  if (steps.empty()) return s;
  // Step 0 pays for warm-up (page faults, thread start); leave it out of rates.
  const std::size_t first = steps.size() > 1 ? 1 : 0;
  double time = 0;
  double exposed = 0;
  double wait_max = 0;
  double reshard = 0;
  double allreduce = 0;
  std::int64_t timed_tokens = 0;
  std::int64_t tokens = 0;
  double min_loss = steps.front().loss;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    tokens += steps[i].tokens;
    min_loss = std::min(min_loss, steps[i].loss);
    if (i < first) continue;
    time += steps[i].step_time_s;
    exposed += steps[i].exposed_sync_s;
    wait_max += steps[i].sync_wait_max_s;
    reshard += static_cast<double>(steps[i].reshard_bytes);
    allreduce += static_cast<double>(steps[i].allreduce_bytes);
    timed_tokens += steps[i].tokens;
  }
  const auto timed = static_cast<double>(steps.size() - first);
  s["first_loss"] = steps.front().loss;
  s["last_loss"] = steps.back().loss;
  s["min_loss"] = min_loss;
  s["tokens"] = tokens;
  s["mean_step_time_s"] = time / timed;
  s["tokens_per_s"] = time > 0 ? static_cast<double>(timed_tokens) / time : 0.0;
  s["exposed_sync_fraction"] = time > 0 ? exposed / time : 0.0;
  s["sync_wait_max_fraction"] = time > 0 ? wait_max / time : 0.0;
  s["reshard_bytes_per_step"] = reshard / timed;
  s["allreduce_bytes_per_step"] = allreduce / timed;
  s["final_tp"] = steps.back().tp;
  s["final_samples"] = steps.back().samples;
  if (!steps.back().power.empty()) s["final_power"] = to_json(steps.back())["power"];
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (!it->val_loss) continue;
    s["last_val_loss"] = *it->val_loss;
    break;
  }
  return s;
}

std::string format_duration(double seconds) {
  const auto total = static_cast<std::int64_t>(std::llround(std::max(0.0, seconds)));
  const std::int64_t h = total / 3600;
  const std::int64_t m = (total / 60) % 60;
  const std::int64_t sec = total % 60;
  return h > 0 ? fmt::format("{}:{:02}:{:02}", h, m, sec) : fmt::format("{}:{:02}", m, sec);
}

std::string progress_line(const StepMetrics& m, std::int64_t total_steps, double elapsed_s) {
  const double rate = m.step_time_s > 0 ? static_cast<double>(m.tokens) / m.step_time_s : 0.0;
  const std::int64_t done = m.step + 1;
  const double eta = done > 0 ? elapsed_s / static_cast<double>(done) *
                                    static_cast<double>(std::max<std::int64_t>(0, total_steps - done))
                              : 0.0;
  // Step numbers count from 0 in every file and message; "(6 of 12)" is a count.
  const std::string val = m.val_loss ? fmt::format("  val {:.4f}", *m.val_loss) : "";
  return fmt::format("step {} ({} of {})  loss {:.4f}{}  {} tok/s  tp [{}]  eta {}", m.step, done, total_steps,
                     m.loss, val, si(rate), fmt::join(m.tp, ","), format_duration(eta));
}

}  // namespace ntp::train
