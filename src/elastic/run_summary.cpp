// The run's record, as said on the console and written to summary.json and
// events.jsonl: the job in one line, a finished run's summary (its steps,
// each in-job recovery, rejoin and restart from a checkpoint), a failed run's
// reason and where it can go on from, and an interrupted run's checkpoint.
// Apart from the launch and its recovery so that what a run reports reads in
// one place.
#include "elastic/run_summary.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <optional>

#include "elastic/train_job.h"
#include "train/checkpoint.h"
#include "train/model_setup.h"

namespace ntp::elastic {
namespace {

void print_summary(std::FILE* out, const nlohmann::json& s, const std::filesystem::path& run_dir) {
  if (s.value("steps", 0) == 0) return;
  std::fprintf(out,
               "done: %d steps, loss %.4f -> %.4f, %.0f tokens/s, %.3f s/step, exposed sync %.1f%% "
               "of step time\n",
               s["steps"].get<int>(), s["first_loss"].get<double>(), s["last_loss"].get<double>(),
               s["tokens_per_s"].get<double>(), s["mean_step_time_s"].get<double>(),
               100.0 * s["exposed_sync_fraction"].get<double>());
  const auto tp = s["final_tp"].get<std::vector<std::int64_t>>();
  const auto samples = s["final_samples"].get<std::vector<std::int64_t>>();
  std::string replicas;
  for (std::size_t r = 0; r < tp.size(); ++r) {
    replicas += fmt::format("{}replica {}: TP {}, {} sequences/step", r == 0 ? "" : "; ", r, tp[r],
                            samples[r]);
    if (s.contains("final_power")) {
      const nlohmann::json& p = s["final_power"][r];
      replicas += fmt::format(" ({:.0f} W/GPU, modelled speed-up {:.3f})",
                              p["limit_w"].get<double>(), p["speedup"].get<double>());
    }
  }
  std::fprintf(out, "%s\n", replicas.c_str());
  const double allreduce = s["allreduce_bytes_per_step"].get<double>();
  if (allreduce > 0) {
    std::fprintf(out, "gradient sync per step: %.0f KiB all-reduced, %.0f KiB resharded\n",
                 allreduce / 1024, s["reshard_bytes_per_step"].get<double>() / 1024);
  }
  std::fprintf(out, "metrics, events, trace and summary in %s\n", run_dir.string().c_str());
  std::fflush(out);  // said even if a signal ends the process during --verify
}

// Each in-job recovery as the survivors logged it: the step redone, the new
// epoch, the ranks lost (and any that rejoined with it), the time from the
// first failure_detected to the last step_resumed of that epoch (the slowest
// survivor) and its phases. Epochs that only took repaired ranks back go to
// `rejoins` (epoch, joined, step, tp, rejoin_s from the restart).
nlohmann::json recoveries(const train::RunDir& run, nlohmann::json& rejoins) {
  // Per epoch, what every survivor logged; an epoch whose recovery broke off
  // (a death during it) folds into the next one that completed.
  struct Epoch {
    double detected = 0;  // first failure_detected
    double agreed = 0;    // last membership_agreed
    double transfer_s = 0;
    double resumed = 0;   // last step_resumed
    nlohmann::json lost = nlohmann::json::array();
    nlohmann::json joined = nlohmann::json::array();
    nlohmann::json resumed_event;
  };
  std::map<std::int64_t, Epoch> epochs;
  std::vector<double> failures;  // when a worker was killed, stopped for good or fenced
  double restarted = 0;          // the last worker started again (elastic.rejoin)
  for (const nlohmann::json& e : train::read_jsonl(run.file("events.jsonl"))) {
    const std::string name = e.value("event", "");
    const double t = e.value("time", 0.0);
    if (name == "failure_injected" || name == "rank_fenced" ||
        (name == "worker_exited" && e.contains("signal") && e["signal"].is_number())) {
      failures.push_back(t);
    }
    if (name == "rank_restarted") restarted = t;
    if (name == "failure_detected") {
      Epoch& x = epochs[e["epoch"].get<std::int64_t>() + 1];
      x.detected = x.detected == 0 ? t : std::min(x.detected, t);
    }
    if (!e.contains("epoch") || !e["epoch"].is_number()) continue;
    Epoch& x = epochs[e["epoch"].get<std::int64_t>()];
    if (name == "membership_agreed") {
      x.lost = e["lost"];
      x.joined = e.value("joined", nlohmann::json::array());
      x.agreed = std::max(x.agreed, t);
    }
    if (name == "state_transferred") x.transfer_s = std::max(x.transfer_s, e.value("seconds", 0.0));
    if (name == "step_resumed") {
      x.resumed = std::max(x.resumed, t);
      x.resumed_event = e;
    }
  }
  const std::vector<train::StepMetrics> metrics =
      std::filesystem::exists(run.file("metrics.jsonl")) ? run.read_metrics() : std::vector<train::StepMetrics>{};
  nlohmann::json out = nlohmann::json::array();
  nlohmann::json lost = nlohmann::json::array();
  double first_detected = 0;
  double previous_end = 0;
  for (const auto& [epoch, x] : epochs) {
    if (x.detected == 0 && x.resumed == 0) continue;
    if (x.detected == 0 && first_detected == 0) {  // a repaired rank came back, nothing failed
      // (or was lost again while it asked: an epoch that took nobody in is no rejoin)
      if (!x.joined.empty()) {
        rejoins.push_back({{"epoch", epoch}, {"joined", x.joined}, {"step", x.resumed_event["step"]},
                           {"tp", x.resumed_event["tp"]},
                           {"rejoin_s", restarted > 0 ? x.resumed - restarted : 0.0}});
      }
      previous_end = x.resumed;
      continue;
    }
    for (const nlohmann::json& r : x.lost) lost.push_back(r);
    if (first_detected == 0) first_detected = x.detected;
    if (x.resumed == 0) continue;  // broke off: the next epoch finishes it
    nlohmann::json r;
    r["epoch"] = epoch;
    r["lost"] = lost;
    r["joined"] = x.joined;
    r["step"] = x.resumed_event["step"];
    r["tp"] = x.resumed_event["tp"];
    r["recovery_s"] = x.resumed - first_detected;
    // The phases: the failure to its first detection, detection to the last
    // survivor's agreement, the slowest state transfer, and the redone step.
    double failed_at = first_detected;  // the first failure since the last recovery ended
    for (double t : failures) {
      if (t > previous_end && t <= first_detected) failed_at = std::min(failed_at, t);
    }
    r["detection_s"] = first_detected - failed_at;
    r["agreement_s"] = x.agreed - first_detected;
    r["transfer_s"] = x.transfer_s;
    const std::int64_t step = r["step"].get<std::int64_t>();
    r["redo_s"] = step < static_cast<std::int64_t>(metrics.size())
                      ? metrics[static_cast<std::size_t>(step)].step_time_s
                      : 0.0;
    out.push_back(r);
    lost = nlohmann::json::array();
    first_detected = 0;
    previous_end = x.resumed;
  }
  return out;
}

}  // namespace

std::string describe_job(const train::Config& c) {
  std::string failed;
  for (const auto& [at, slots] : c.parallel.failed) {
    const std::string stage = c.parallel.pp > 1 ? fmt::format(" stage {}", at.stage) : "";
    failed += fmt::format(" replica {}{} without slots [{}];", at.replica, stage, fmt::join(slots, ","));
  }
  // The device only when it is a GPU: a CPU run's line stays as it was.
  const std::string device = c.model.device == tensor::Device::kCuda ? " on cuda" : "";
  const std::string pp = c.parallel.pp > 1 ? fmt::format(" x pp {}", c.parallel.pp) : "";
  return fmt::format("model {}{}, dp {}{} x tp {},{} batch {} ({}), {} steps, data {}",
                     train::describe_model(c.model), device, c.parallel.dp, pp, c.parallel.tp,
                     failed.empty() ? " all healthy;" : failed, c.train.global_batch, train::to_string(c.parallel.batch_policy), c.train.steps,
                     c.data.path.empty() ? "built-in corpus" : c.data.path);
}

nlohmann::json finish_run(const train::Config& config, const train::RunDir& run,
                          const std::vector<train::StepMetrics>& metrics, double start, std::FILE* out) {
  nlohmann::json summary = train::summarize(metrics, train::unix_time_s() - start);
  summary["job"] = describe_job(config);
  summary["status"] = "finished";
  if (config.elastic.recover) {
    nlohmann::json rejoins = nlohmann::json::array();
    summary["recoveries"] = recoveries(run, rejoins);
    summary["rejoins"] = rejoins;
    for (const nlohmann::json& r : rejoins) {
      std::fprintf(out, "rejoined: ranks %s at step %lld, tp %s, %.3f s from the restart\n",
                   r["joined"].dump().c_str(), static_cast<long long>(r["step"].get<std::int64_t>()),
                   r["tp"].dump().c_str(), r["rejoin_s"].get<double>());
    }
    for (const nlohmann::json& r : summary["recoveries"]) {
      std::fprintf(out,
                   "recovered: lost ranks %s, step %lld redone at tp %s, %.3f s (detection %.3f, "
                   "agreement %.3f, transfer %.3f, redo %.3f)\n",
                   r.value("lost", nlohmann::json::array()).dump().c_str(),
                   static_cast<long long>(r["step"].get<std::int64_t>()), r["tp"].dump().c_str(),
                   r["recovery_s"].get<double>(), r["detection_s"].get<double>(),
                   r["agreement_s"].get<double>(), r["transfer_s"].get<double>(), r["redo_s"].get<double>());
    }
  }
  // Restarts from a checkpoint (elastic.fallback), from their events.
  nlohmann::json restarts = nlohmann::json::array();
  for (const nlohmann::json& e : train::read_jsonl(run.file("events.jsonl"))) {
    if (e.value("time", 0.0) < start) continue;
    if (e.value("event", "") == "fallback_restart") {
      restarts.push_back({{"checkpoint", e["checkpoint"]}, {"lost", e["lost"]}, {"tp", e["tp"]}});
    }
    if (e.value("event", "") == "fallback_step_done" && !restarts.empty()) {
      restarts.back()["first_step_s"] = e["seconds"];
      std::fprintf(out, "restarted from %s with tp %s: %.3f s to the first step\n",
                   restarts.back()["checkpoint"].get<std::string>().c_str(), restarts.back()["tp"].dump().c_str(),
                   e["seconds"].get<double>());
    }
  }
  if (!restarts.empty()) summary["restarts"] = restarts;
  run.event("run_finished", {{"steps", metrics.size()}});
  run.write_summary(summary);
  print_summary(out, summary, run.path());
  return summary;
}

void record_failure(const train::Config& config, const train::RunDir& run, const std::string& reason,
                    std::FILE* out) {
  const std::optional<std::filesystem::path> newest = train::newest_intact_checkpoint(run.path() / "checkpoints");
  if (newest) {
    std::fprintf(out, "ntp train: the newest checkpoint is %s; continue with: ntp train --resume %s\n",
                 newest->string().c_str(), run.path().string().c_str());
    std::fflush(out);
  }
  try {
    run.event("run_failed", {{"reason", reason}});
    nlohmann::json summary = {{"status", "failed"}, {"reason", reason}, {"job", describe_job(config)}};
    try {
      summary["steps_logged"] = run.read_metrics().size();
    } catch (const std::exception&) {
      summary["steps_logged"] = 0;
    }
    if (newest) summary["checkpoint"] = newest->string();
    run.write_summary(summary);
  } catch (const std::exception& e) {
    spdlog::warn("ntp train: the failure could not be recorded in {}: {}", run.path().string(), e.what());
  }
}

Interruption interruption(const std::filesystem::path& run_dir, std::int64_t steps_done) {
  const std::filesystem::path root = run_dir / "checkpoints";
  const std::string head = fmt::format("interrupted after {} step{}", steps_done, steps_done == 1 ? "" : "s");
  const std::filesystem::path saved = train::final_dir(root, steps_done);
  if (std::filesystem::exists(saved / "manifest.json")) {
    return {saved, fmt::format("{}; checkpoint {}; continue with: ntp train --resume {}", head, saved.string(),
                               run_dir.string())};
  }
  const std::string failed =
      fmt::format("the checkpoint of step {} did not complete (a writer was lost during its save)", steps_done);
  const std::optional<std::filesystem::path> newest = train::newest_checkpoint(root);
  if (!newest) return {std::nullopt, fmt::format("{}; {} and there is no earlier one to resume from", head, failed)};
  return {newest, fmt::format("{}; {}; the newest is {}; continue with: ntp train --resume {}", head, failed,
                              newest->string(), run_dir.string())};
}

}  // namespace ntp::elastic
