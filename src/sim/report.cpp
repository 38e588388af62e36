// Outputs of a study (formats: docs/sim.md, "Outputs").
#include "sim/report.h"

#include "sim/failslow.h"
#include "sim/step_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ntp::sim {
namespace {

using nlohmann::json;

std::vector<Policy> compared(const StudyPoint& p) { return p.scenario.policies.compare; }

std::size_t idx(Policy p) { return static_cast<std::size_t>(p); }

double finite_or(double v, double fallback) { return std::isfinite(v) ? v : fallback; }

json step_json(const StepBreakdown& b) {
  return {{"microbatches", b.microbatches},   {"compute_s", b.compute_s},
          {"tp_comm_s", b.tp_comm_s},         {"tp_exposed_s", b.tp_exposed_s},
          {"p2p_s", b.p2p_s},                 {"microbatch_s", b.microbatch_s},
          {"bubble_s", b.bubble_s},           {"dp_sync_s", b.dp_sync_s},
          {"dp_exposed_s", b.dp_exposed_s},   {"step_s", b.step_s},
          {"flops_per_token", b.flops_per_token}, {"tokens_per_s", b.tokens_per_s},
          {"mfu", b.mfu},                     {"params", b.params}};
}

json pause_json(const ReconfigPause& p) {
  return {{"failure_s", p.failure_s},
          {"rejoin_s", p.rejoin_s},
          {"failure_move_s", p.failure_move_s},
          {"rejoin_move_s", p.rejoin_move_s},
          {"failure_bytes_up", p.failure_bytes_up},
          {"failure_bytes_out", p.failure_bytes_out},
          {"rejoin_bytes_up", p.rejoin_bytes_up},
          {"rejoin_bytes_out", p.rejoin_bytes_out}};
}

json snapshot_json(const StudyPoint& p) {
  json points = json::array();
  for (const SnapshotPoint& sp : p.snapshot->points) {
    json policies;
    for (const Policy pol : compared(p)) {
      if (pol == Policy::kCkptRestart) continue;  // no static value (docs/sim.md)
      policies[policy_name(pol)] = {{"throughput", sp.mean[idx(pol)]},
                                    {"stderr", sp.stderr_[idx(pol)]}};
    }
    points.push_back({{"failed_fraction", sp.failed_fraction},
                      {"healthy_tp_groups", sp.healthy_groups_mean},
                      {"healthy_tp_groups_stderr", sp.healthy_groups_stderr},
                      {"healthy_tp_groups_expected",
                       std::pow(1.0 - sp.failed_fraction, p.scenario.parallel.tp)},
                      {"policies", policies}});
  }
  return {{"placements", p.snapshot->placements}, {"points", points}};
}

// ntp-pw's boost energy as a fraction of the job's energy at TDP.
double boost_energy_share(const StudyPoint& p) {
  const TimelineResult& t = *p.timeline;
  const double job_kwh = p.scenario.cluster.gpus * p.scenario.cluster.tdp_w * t.duration_hours / 1000.0;
  return t.boost_energy_kwh_mean / job_kwh;
}

json timeline_json(const StudyPoint& p) {
  const TimelineResult& t = *p.timeline;
  json policies;
  for (const Policy pol : compared(p)) {
    const PolicySummary& s = t.policy[idx(pol)];
    json entry = {{"goodput", s.goodput_mean},
                  {"goodput_stderr", s.goodput_stderr},
                  {"goodput_min", s.goodput_min},
                  {"loss_percent", 100.0 * (1.0 - s.goodput_mean)},
                  {"pause_hours", s.pause_hours_mean},
                  {"spares_for_zero_pause", s.spares_needed_max},
                  {"spares_for_zero_pause_mean", s.spares_needed_mean}};
    if (pol == Policy::kNtpPw) {
      entry["boost_energy_kwh_per_day"] = t.boost_energy_kwh_mean / (t.duration_hours / 24.0);
      entry["boost_energy_percent"] = 100.0 * boost_energy_share(p);
    }
    if (pol == Policy::kCkptRestart) {
      entry["spares_for_zero_pause"] = nullptr;  // it pauses at every failure whatever the spares
      entry["spares_for_zero_pause_mean"] = nullptr;
      entry["lost_work_hours"] = t.ckpt_lost_hours_mean;
      entry["interval_hours"] = finite_or(t.ckpt_interval_hours, -1.0);
    }
    policies[policy_name(pol)] = entry;
  }
  json above = json::array();
  for (std::size_t j = 0; j < t.above_threshold_mean.size(); ++j) {
    above.push_back({{"percent", p.scenario.run.thresholds_percent[j]},
                     {"time_share", t.above_threshold_mean[j]},
                     {"time_share_max", t.above_threshold_max[j]}});
  }
  json out = {{"duration_hours", t.duration_hours},
          {"seeds", t.seeds},
          {"warmup_days", p.scenario.run.warmup_days},
          {"failed_above_threshold", above},
          {"failures_per_seed", t.failures_mean},
          {"failed_fraction", t.failed_fraction_mean},
          {"peak_failed_gpus_mean", t.peak_failed_gpus_mean},
          {"peak_failed_gpus_max", t.peak_failed_gpus_max},
          {"policies", policies}};
  if (t.failslow) {
    json treatments;
    for (int i = 0; i < kSlowTreatmentCount; ++i) {
      const PolicySummary& s = t.slow[static_cast<std::size_t>(i)];
      treatments[slow_treatment_name(static_cast<SlowTreatment>(i))] = {
          {"goodput", s.goodput_mean}, {"goodput_stderr", s.goodput_stderr}, {"goodput_min", s.goodput_min},
          {"loss_percent", 100.0 * (1.0 - s.goodput_mean)}, {"pause_hours", s.pause_hours_mean}};
    }
    out["failslow"] = {{"events_per_seed", t.slow_events_mean}, {"treatments", treatments}};
  }
  return out;
}

void write_file(const std::filesystem::path& path, const std::string& text,
                std::vector<std::string>& written) {
  std::ofstream out(path);
  out << text;
  if (!out) throw std::runtime_error(path.string() + ": cannot write");
  written.push_back(path.string());
}

std::string fmt(double v) {
  std::ostringstream os;
  os.precision(10);
  os << v;
  return os.str();
}

std::string label(const Study& study, const StudyPoint& p) {
  return study.sweep_key.empty() ? "" : study.sweep_key + " = " + p.sweep_value;
}

bool numeric(const std::string& text, double& v) {
  try {
    std::size_t used = 0;
    v = std::stod(text, &used);
    return used == text.size();
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

json study_json(const Study& study) {
  json points = json::array();
  for (const StudyPoint& p : study.points) {
    const Scenario& s = p.scenario;
    json point = {{"sweep_value", p.sweep_value},
                  {"gpus", s.cluster.gpus},
                  {"tp", s.parallel.tp},
                  {"pp", s.parallel.pp},
                  {"dp", s.dp()},
                  {"domain_size", s.cluster.domain_size},
                  {"spare_domains", s.spares.domains},
                  {"failure_rate_per_gpu_day", s.failures.rate_per_gpu_day * s.failures.rate_multiplier},
                  {"mean_repair_hours", s.failures.mean_repair_hours()},
                  {"pack", s.policies.pack},
                  {"fixed_global_batch", s.policies.fixed_global_batch},
                  {"healthy_step", step_json(p.step)},
                  {"reconfig_pause", pause_json(p.pause)}};
    if (p.snapshot) point["snapshot"] = snapshot_json(p);
    if (p.timeline) point["timeline"] = timeline_json(p);
    points.push_back(point);
  }
  return {{"scenario", study.source}, {"sweep_key", study.sweep_key}, {"points", points}};
}

std::string step_model_csv(const Study& study) {
  std::ostringstream os;
  os << "sweep_value,microbatches,compute_s,tp_comm_s,tp_exposed_s,p2p_s,microbatch_s,bubble_s,"
        "dp_sync_s,dp_exposed_s,step_s,tokens_per_s,mfu\n";
  for (const StudyPoint& p : study.points) {
    const StepBreakdown& b = p.step;
    os << p.sweep_value << "," << fmt(b.microbatches) << "," << fmt(b.compute_s) << ","
       << fmt(b.tp_comm_s) << "," << fmt(b.tp_exposed_s) << "," << fmt(b.p2p_s) << ","
       << fmt(b.microbatch_s) << "," << fmt(b.bubble_s) << "," << fmt(b.dp_sync_s) << ","
       << fmt(b.dp_exposed_s) << "," << fmt(b.step_s) << "," << fmt(b.tokens_per_s) << ","
       << fmt(b.mfu) << "\n";
  }
  return os.str();
}

std::string snapshot_csv(const Study& study) {
  std::ostringstream os;
  os << "sweep_value,failed_fraction,policy,throughput,stderr,healthy_tp_groups,"
        "healthy_tp_groups_expected\n";
  for (const StudyPoint& p : study.points) {
    if (!p.snapshot) continue;
    for (const SnapshotPoint& sp : p.snapshot->points) {
      for (const Policy pol : compared(p)) {
        if (pol == Policy::kCkptRestart) continue;
        os << p.sweep_value << "," << fmt(sp.failed_fraction) << "," << policy_name(pol) << ","
           << fmt(sp.mean[idx(pol)]) << "," << fmt(sp.stderr_[idx(pol)]) << ","
           << fmt(sp.healthy_groups_mean) << ","
           << fmt(std::pow(1.0 - sp.failed_fraction, p.scenario.parallel.tp)) << "\n";
      }
    }
  }
  return os.str();
}

std::string timeline_summary_csv(const Study& study) {
  std::ostringstream os;
  os << "sweep_value,policy,goodput,goodput_stderr,goodput_min,loss_percent,pause_hours,"
        "spares_for_zero_pause,failed_fraction,peak_failed_gpus_max,failures_per_seed,"
        "spares_for_zero_pause_mean\n";
  for (const StudyPoint& p : study.points) {
    if (!p.timeline) continue;
    const TimelineResult& t = *p.timeline;
    for (const Policy pol : compared(p)) {
      const PolicySummary& s = t.policy[idx(pol)];
      os << p.sweep_value << "," << policy_name(pol) << "," << fmt(s.goodput_mean) << ","
         << fmt(s.goodput_stderr) << "," << fmt(s.goodput_min) << ","
         << fmt(100.0 * (1.0 - s.goodput_mean)) << "," << fmt(s.pause_hours_mean) << ","
         << (pol == Policy::kCkptRestart ? "" : fmt(s.spares_needed_max)) << ","
         << fmt(t.failed_fraction_mean) << ","
         << t.peak_failed_gpus_max << "," << fmt(t.failures_mean) << ","
         << (pol == Policy::kCkptRestart ? "" : fmt(s.spares_needed_mean)) << "\n";
    }
  }
  return os.str();
}

std::string timeline_series_csv(const Study& study) {
  std::ostringstream os;
  os << "sweep_value,hours,failed_gpus_mean,failed_gpus_seed0";
  const std::vector<Policy> pols = study.points.front().scenario.policies.compare;
  for (const Policy pol : pols) os << "," << policy_name(pol) << "_mean";
  for (const Policy pol : pols) os << "," << policy_name(pol) << "_seed0";
  os << "\n";
  for (const StudyPoint& p : study.points) {
    if (!p.timeline) continue;
    const TimelineResult& t = *p.timeline;
    for (std::size_t b = 0; b < t.series_mean.size(); ++b) {
      os << p.sweep_value << "," << fmt(static_cast<double>(b) * t.bucket_hours) << ","
         << fmt(t.failed_series_mean[b]) << "," << fmt(t.first_seed.failed_series[b]);
      for (const Policy pol : pols) os << "," << fmt(t.series_mean[b][idx(pol)]);
      for (const Policy pol : pols) os << "," << fmt(t.first_seed.series[b][idx(pol)]);
      os << "\n";
    }
  }
  return os.str();
}

Chart loss_vs_failed_fraction_chart(const StudyPoint& point) {
  Chart c{"Throughput loss vs failed GPUs", "failed GPUs (%)", "throughput loss (%)", "", {}};
  if (!point.snapshot) return c;
  for (const Policy pol : compared(point)) {
    if (pol == Policy::kCkptRestart) continue;
    Series s{policy_name(pol), {}, {}, false, true, false};
    for (const SnapshotPoint& sp : point.snapshot->points) {
      s.x.push_back(100.0 * sp.failed_fraction);
      s.y.push_back(100.0 * (1.0 - sp.mean[idx(pol)]));
    }
    c.series.push_back(s);
  }
  return c;
}

Chart failure_timeline_chart(const StudyPoint& point) {
  Chart c{"Failure timeline (seed 0)", "day", "throughput (relative to failure-free)",
          "failed GPUs", {}};
  if (!point.timeline) return c;
  const TimelineResult& t = *point.timeline;
  std::vector<double> days;
  for (std::size_t b = 0; b < t.first_seed.series.size(); ++b) {
    days.push_back(static_cast<double>(b) * t.bucket_hours / 24.0);
  }
  days.push_back(t.duration_hours / 24.0);  // steps hold their last value to the end
  auto held = [](std::vector<double> y) {
    y.push_back(y.empty() ? 0.0 : y.back());
    return y;
  };
  for (const Policy pol : compared(point)) {
    std::vector<double> y;
    for (const PolicyValues& v : t.first_seed.series) y.push_back(v[idx(pol)]);
    c.series.push_back({policy_name(pol), days, held(y), true, false, false});
  }
  c.series.push_back(
      {"failed GPUs (right axis)", days, held(t.first_seed.failed_series), true, false, true});
  return c;
}

namespace {

// A series of `metric(point)` against the swept value; empty when a value is
// not a number or the study is not a timeline sweep.
template <typename Metric>
Series sweep_series(const Study& study, const std::string& name, Metric metric, bool right) {
  Series s{name, {}, {}, false, true, right};
  if (study.sweep_key.empty() || !study.points.front().timeline) return s;
  for (const StudyPoint& p : study.points) {
    double x = 0;
    if (!numeric(p.sweep_value, x)) return Series{};
    s.x.push_back(x);
    s.y.push_back(metric(*p.timeline));
  }
  return s;
}

}  // namespace

Chart sweep_chart(const Study& study) {
  Chart c{"Goodput loss vs " + study.sweep_key, study.sweep_key, "goodput loss (%)", "", {}};
  for (const Policy pol : compared(study.points.front())) {
    Series s = sweep_series(study, policy_name(pol), [&](const TimelineResult& t) {
      return 100.0 * (1.0 - t.policy[idx(pol)].goodput_mean);
    }, false);
    if (s.x.empty()) return Chart{};
    c.series.push_back(std::move(s));
  }
  return c;
}

Chart failslow_chart(const Study& study) {
  Chart c{"Goodput under fail-slow per treatment vs " + study.sweep_key, study.sweep_key,
          "goodput (fail-slow alone)", "", {}};
  if (!study.points.front().timeline || !study.points.front().timeline->failslow) return c;
  for (int i = 0; i < kSlowTreatmentCount; ++i) {
    Series s = sweep_series(study, slow_treatment_name(static_cast<SlowTreatment>(i)), [&](const TimelineResult& t) {
      return t.slow[static_cast<std::size_t>(i)].goodput_mean;
    }, false);
    if (s.x.empty()) return Chart{};
    c.series.push_back(std::move(s));
  }
  return c;
}

Chart compute_vs_tp_chart(const Scenario& scenario) {
  const int n = scenario.parallel.tp;
  Chart c{"Busiest GPU's compute vs TP degree (relative to TP " + std::to_string(n) + ")", "TP degree k",
          "compute of the busiest GPU / compute at TP " + std::to_string(n), "", {}};
  Series ideal{"ideal " + std::to_string(n) + "/k", {}, {}, false, true, false};
  for (int k = n; k >= scenario.min_tp(); --k) {
    ideal.x.push_back(k);
    ideal.y.push_back(static_cast<double>(n) / k);
  }
  for (const int align : {1, 64}) {
    Scenario s = scenario;
    s.parallel.align = align;
    const StepModel m(s);
    Series series{"align " + std::to_string(align), {}, {}, false, true, false};
    for (int k = n; k >= s.min_tp(); --k) {
      series.x.push_back(k);
      series.y.push_back(m.compute_s(k) / m.compute_s(n));
    }
    c.series.push_back(std::move(series));
  }
  c.series.push_back(std::move(ideal));
  return c;
}

Chart spares_vs_boost_chart(const Study& study) {
  Chart c{"Spares for zero pause and boost energy vs " + study.sweep_key, study.sweep_key,
          "spare domains for zero pause (worst seed)", "ntp-pw boost energy (kWh per day)", {}};
  const std::vector<Policy> pols = compared(study.points.front());
  for (const Policy pol : pols) {
    if (pol == Policy::kCkptRestart) continue;
    Series s = sweep_series(study, policy_name(pol), [&](const TimelineResult& t) {
      return t.policy[idx(pol)].spares_needed_max;
    }, false);
    if (s.x.empty()) return Chart{};
    c.series.push_back(std::move(s));
  }
  if (std::find(pols.begin(), pols.end(), Policy::kNtpPw) != pols.end()) {
    c.series.push_back(sweep_series(study, "ntp-pw energy", [](const TimelineResult& t) {
      return t.boost_energy_kwh_mean / (t.duration_hours / 24.0);
    }, true));
  }
  return c;
}

Chart spares_vs_pause_chart(const Study& study) {
  Chart c{"Pause time vs spare domains", "spare domains", "pause (hours, mean per run)", "", {}};
  if (study.sweep_key != "spares.domains" || !study.points.front().timeline) return c;
  for (const Policy pol : compared(study.points.front())) {
    Series s{policy_name(pol), {}, {}, false, true, false};
    for (const StudyPoint& p : study.points) {
      s.x.push_back(p.scenario.spares.domains);
      s.y.push_back(p.timeline->policy[idx(pol)].pause_hours_mean);
    }
    c.series.push_back(s);
  }
  return c;
}

namespace {

// printf into a std::string: the text tables are fixed-width columns.
template <typename... Args>
std::string cell(const char* format, Args... args) {
  char buf[128];
  std::snprintf(buf, sizeof buf, format, args...);
  return buf;
}

void snapshot_table(std::ostringstream& os, const StudyPoint& p) {
  os << cell("%9s %10s %10s", "failed_%", "healthy_TP", "expected");
  for (const Policy pol : compared(p)) {
    if (pol != Policy::kCkptRestart) os << cell(" %9s", policy_name(pol));
  }
  os << "\n";
  for (const SnapshotPoint& sp : p.snapshot->points) {
    os << cell("%9.3f %10.4f %10.4f", 100.0 * sp.failed_fraction, sp.healthy_groups_mean,
               std::pow(1.0 - sp.failed_fraction, p.scenario.parallel.tp));
    for (const Policy pol : compared(p)) {
      if (pol != Policy::kCkptRestart) os << cell(" %9.4f", sp.mean[idx(pol)]);
    }
    os << "\n";
  }
  os << "(throughput relative to failure-free, mean of " << p.snapshot->placements
     << " placements; ckpt-restart has no snapshot value)\n";
}

void timeline_table(std::ostringstream& os, const StudyPoint& p) {
  const TimelineResult& t = *p.timeline;
  os << cell("%d seeds x %.3g days: %.1f failures per run, peak %d failed GPUs, mean failed %.4f %%\n",
             t.seeds, t.duration_hours / 24.0, t.failures_mean, t.peak_failed_gpus_max,
             100.0 * t.failed_fraction_mean);
  os << cell("%-12s %8s %8s %8s %7s %8s %7s %7s\n", "policy", "goodput", "stderr", "worst", "loss_%",
             "pause_h", "spares", "mean");
  for (const Policy pol : compared(p)) {
    const PolicySummary& s = t.policy[idx(pol)];
    os << cell("%-12s %8.4f %8.4f %8.4f %7.2f %8.2f", policy_name(pol), s.goodput_mean,
               s.goodput_stderr, s.goodput_min, 100.0 * (1.0 - s.goodput_mean), s.pause_hours_mean);
    // ckpt-restart pauses at every failure whatever the spares: no count stops that.
    os << (pol == Policy::kCkptRestart
               ? cell(" %7s %7s\n", "-", "-")
               : cell(" %7ld %7.1f\n", static_cast<long>(s.spares_needed_max), s.spares_needed_mean));
  }
  const std::vector<Policy> pols = compared(p);
  if (std::find(pols.begin(), pols.end(), Policy::kCkptRestart) != pols.end() &&
      std::isfinite(t.ckpt_interval_hours)) {
    os << cell("ckpt-restart: checkpoint every %.3g min, %.2f h of work lost per run\n",
               60.0 * t.ckpt_interval_hours, t.ckpt_lost_hours_mean);
  }
  if (std::find(pols.begin(), pols.end(), Policy::kNtpPw) != pols.end()) {
    os << cell("ntp-pw: boosted GPUs draw %.1f kWh per day above TDP, %.4f %% of the job's energy\n",
               t.boost_energy_kwh_mean / (t.duration_hours / 24.0), 100.0 * boost_energy_share(p));
  }
  for (std::size_t j = 0; j < t.above_threshold_mean.size(); ++j) {
    os << cell("more than %g %% of GPUs failed: %.3f %% of the time (worst seed %.3f %%)\n",
               p.scenario.run.thresholds_percent[j], 100.0 * t.above_threshold_mean[j],
               100.0 * t.above_threshold_max[j]);
  }
  os << "(spares: spare domains a fixed-global-batch job needs to keep full pace, worst seed and mean)\n";
  if (t.failslow) {
    os << cell("fail-slow alone (no fail-stops): %.1f GPUs turned slow per run\n", t.slow_events_mean);
    os << cell("%-12s %8s %8s %8s %7s %8s\n", "treatment", "goodput", "stderr", "worst", "loss_%", "pause_h");
    for (int i = 0; i < kSlowTreatmentCount; ++i) {
      const PolicySummary& s = t.slow[static_cast<std::size_t>(i)];
      os << cell("%-12s %8.4f %8.4f %8.4f %7.2f %8.2f\n", slow_treatment_name(static_cast<SlowTreatment>(i)),
                 s.goodput_mean, s.goodput_stderr, s.goodput_min, 100.0 * (1.0 - s.goodput_mean),
                 s.pause_hours_mean);
    }
  }
}

}  // namespace

std::string text_summary(const Study& study) {
  std::ostringstream os;
  for (const StudyPoint& p : study.points) {
    const std::string l = label(study, p);
    if (!l.empty()) os << "== " << l << "\n";
    os << cell("healthy step %.3f s, MFU %.1f %%, %d replicas of TP %d x PP %d\n", p.step.step_s,
               100.0 * p.step.mfu, p.scenario.dp(), p.scenario.parallel.tp, p.scenario.parallel.pp);
    os << cell("reconfiguration pause %.1f s after a failure (%s), %.1f s after a repair (%s)\n",
               p.pause.failure_s, p.scenario.policies.reconfig_s ? "set" : "plan", p.pause.rejoin_s,
               p.scenario.policies.rejoin_s ? "set" : "plan");
    if (p.snapshot) snapshot_table(os, p);
    if (p.timeline) timeline_table(os, p);
  }
  return os.str();
}

void prepare_output_dir(const std::string& dir, bool force) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
    throw std::invalid_argument("--out " + dir + ": exists and is not a folder");
  }
  if (fs::is_directory(dir, ec) && !fs::is_empty(dir, ec) && !force) {
    throw std::invalid_argument("--out " + dir +
                                ": the folder is not empty (--force writes into it anyway)");
  }
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error("--out " + dir + ": cannot create the folder: " + ec.message());
  const fs::path probe = fs::path(dir) / ".ntp-sim-write-test";
  {
    std::ofstream out(probe);
    if (!out || !(out << "ok\n") || !out.flush()) {
      throw std::runtime_error("--out " + dir + ": cannot write into the folder");
    }
  }
  fs::remove(probe, ec);
}

std::vector<std::string> write_report(const Study& study, const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error(dir + ": cannot create output directory: " + ec.message());
  std::vector<std::string> written;
  const fs::path root(dir);
  write_file(root / "summary.json", study_json(study).dump(2) + "\n", written);
  write_file(root / "scenario.toml", study.scenario_toml, written);
  write_file(root / "step_model.csv", step_model_csv(study), written);
  write_file(root / "compute_vs_tp.svg", render_svg(compute_vs_tp_chart(study.points.front().scenario)), written);
  const StudyPoint& first = study.points.front();
  if (first.snapshot) {
    write_file(root / "snapshot.csv", snapshot_csv(study), written);
    for (std::size_t i = 0; i < study.points.size(); ++i) {
      const std::string name = study.points.size() == 1
                                   ? "loss_vs_failed_fraction.svg"
                                   : "loss_vs_failed_fraction_" + std::to_string(i) + ".svg";
      Chart c = loss_vs_failed_fraction_chart(study.points[i]);
      if (!label(study, study.points[i]).empty()) c.title += " (" + label(study, study.points[i]) + ")";
      write_file(root / name, render_svg(c), written);
    }
  }
  if (first.timeline) {
    write_file(root / "timeline_summary.csv", timeline_summary_csv(study), written);
    write_file(root / "timeline_series.csv", timeline_series_csv(study), written);
    write_file(root / "failure_timeline.svg", render_svg(failure_timeline_chart(first)), written);
    if (const Chart c = sweep_chart(study); !c.series.empty()) {
      write_file(root / "sweep.svg", render_svg(c), written);
    }
    if (const Chart c = spares_vs_boost_chart(study); !c.series.empty()) {
      write_file(root / "spares_vs_boost.svg", render_svg(c), written);
    }
    if (const Chart c = spares_vs_pause_chart(study); !c.series.empty()) {
      write_file(root / "spares_vs_pause.svg", render_svg(c), written);
    }
    if (const Chart c = failslow_chart(study); !c.series.empty()) {
      write_file(root / "failslow.svg", render_svg(c), written);
    }
  }
  return written;
}

}  // namespace ntp::sim
