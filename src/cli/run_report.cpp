#include "cli/run_report.h"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "train/run_dir.h"

namespace ntp::cli {
namespace {

using sim::Chart;
using sim::Series;

std::vector<double> steps_of(const std::vector<train::StepMetrics>& metrics) {
  std::vector<double> x;
  for (const train::StepMetrics& m : metrics) x.push_back(static_cast<double>(m.step));
  return x;
}

Chart loss_chart(const std::vector<train::StepMetrics>& metrics) {
  Chart c{"Loss", "step", "loss per token (nats)", "", {}};
  Series train{"train loss", steps_of(metrics), {}};
  Series val{"validation loss", {}, {}};
  val.markers = true;
  for (const train::StepMetrics& m : metrics) {
    train.y.push_back(m.loss);
    if (!m.val_loss) continue;
    val.x.push_back(static_cast<double>(m.step));
    val.y.push_back(*m.val_loss);
  }
  c.series.push_back(std::move(train));
  if (!val.x.empty()) c.series.push_back(std::move(val));
  return c;
}

Chart speed_chart(const std::vector<train::StepMetrics>& metrics) {
  Chart c{"Throughput", "step", "tokens/s", "step time (s)", {}};
  Series rate{"tokens/s", steps_of(metrics), {}};
  Series time{"step time (s)", steps_of(metrics), {}};
  time.right_axis = true;
  for (const train::StepMetrics& m : metrics) {
    rate.y.push_back(m.step_time_s > 0 ? static_cast<double>(m.tokens) / m.step_time_s : 0.0);
    time.y.push_back(m.step_time_s);
  }
  c.series = {std::move(rate), std::move(time)};
  return c;
}

Chart sync_chart(const std::vector<train::StepMetrics>& metrics) {
  Chart c{"Exposed gradient sync", "step", "seconds per step", "", {}};
  Series sync{"exposed sync (s)", steps_of(metrics), {}};
  for (const train::StepMetrics& m : metrics) sync.y.push_back(m.exposed_sync_s);
  c.series = {std::move(sync)};
  return c;
}

// Wall time of each step since the run started: the logged time, else the
// sum of the step times.
std::vector<double> step_times(const std::vector<train::StepMetrics>& metrics, double start) {
  std::vector<double> t;
  double sum = 0;
  for (const train::StepMetrics& m : metrics) {
    sum += m.step_time_s;
    t.push_back(m.time > 0 ? m.time - start : sum);
  }
  return t;
}

// Vertical marks at `times` from 0 to `top` (one series: down the axis between marks).
Series marks(const std::string& name, const std::vector<double>& times, double top) {
  Series s{name, {}, {}};
  for (double t : times) {
    s.x.insert(s.x.end(), {t, t, t});
    s.y.insert(s.y.end(), {0.0, top, 0.0});
  }
  return s;
}

Chart tp_chart(const std::vector<train::StepMetrics>& metrics, const std::vector<nlohmann::json>& events) {
  Chart c{"TP degree per replica, failures and recoveries", "seconds since the run started", "active GPUs (TP degree)",
          "", {}};
  double start = metrics.empty() ? 0.0 : metrics.front().time;
  for (const nlohmann::json& e : events) {
    if (e.value("event", "") == "run_started") start = e.value("time", start);
  }
  const std::vector<double> times = step_times(metrics, start);
  std::size_t replicas = 0;
  double top = 1;
  for (const train::StepMetrics& m : metrics) {
    replicas = std::max(replicas, m.tp.size());
    for (std::int64_t tp : m.tp) top = std::max(top, static_cast<double>(tp));
  }
  std::set<std::size_t> overlapping;  // replicas whose line meets another's somewhere
  for (std::size_t r = 0; r < replicas; ++r) {
    Series s{fmt::format("replica {}", r), {}, {}};
    s.steps = true;
    for (std::size_t i = 0; i < metrics.size(); ++i) {
      s.x.push_back(times[i]);
      s.y.push_back(r < metrics[i].tp.size() ? static_cast<double>(metrics[i].tp[r]) : 0.0);
    }
    // Replicas at the same TP would draw one line over another: each is
    // drawn 3 px below the one before, and the title says which overlap.
    s.offset_px = 3.0 * static_cast<double>(r);
    for (std::size_t other = 0; other < r; ++other) {
      bool meets = false;  // at the same TP at one step at least
      for (std::size_t i = 0; i < s.y.size(); ++i) meets = meets || c.series[other].y[i] == s.y[i];
      if (meets) overlapping.insert({other, r});
    }
    c.series.push_back(std::move(s));
  }
  if (!overlapping.empty()) {
    c.title += fmt::format(" ({} lines overlap: drawn 3 px apart)", overlapping.size());
  }
  top += 0.5;  // headroom: a line at the highest TP is not drawn on the frame
  std::map<std::string, std::vector<double>> kinds;  // mark name -> times
  std::map<std::int64_t, double> resumed;            // epoch -> first step_resumed
  // One failure of a rank is logged up to three times (failure_injected by
  // the rank, worker_exited by its launcher, rank_fenced), milliseconds
  // apart: it is marked once, until the next recovery.
  std::set<std::int64_t> failed;
  for (const nlohmann::json& e : events) {
    const std::string name = e.value("event", "");
    const double t = e.value("time", 0.0) - start;
    const bool killed = name == "worker_exited" && e.contains("signal") && e["signal"].is_number();
    if (name == "failure_injected" || name == "rank_fenced" || killed) {
      const bool known = e.contains("rank") && e["rank"].is_number_integer();
      if (!known || failed.insert(e["rank"].get<std::int64_t>()).second) kinds["failure"].push_back(t);
    }
    if (name == "step_resumed" && e.contains("epoch") && !resumed.contains(e["epoch"].get<std::int64_t>())) {
      resumed[e["epoch"].get<std::int64_t>()] = t;
      kinds[e.contains("joined") && !e["joined"].empty() ? "rejoin" : "recovery"].push_back(t);
      failed.clear();
    }
  }
  for (const auto& [name, at] : kinds) c.series.push_back(marks(name, at, top));
  return c;
}

std::string inline_svg(const Chart& chart) {
  std::string svg = sim::render_svg(chart);
  const std::size_t body = svg.find("<svg");
  return svg.substr(body == std::string::npos ? 0 : body);
}

}  // namespace

std::vector<Chart> run_charts(const std::vector<train::StepMetrics>& metrics,
                              const std::vector<nlohmann::json>& events) {
  return {loss_chart(metrics), speed_chart(metrics), sync_chart(metrics), tp_chart(metrics, events)};
}

std::filesystem::path write_run_report(const std::filesystem::path& run_dir) {
  const train::RunDir run = train::RunDir::open(run_dir);
  const std::vector<train::StepMetrics> metrics = run.read_metrics();
  if (metrics.empty()) throw std::runtime_error(fmt::format("{}: no steps in metrics.jsonl", run_dir.string()));
  const std::vector<nlohmann::json> events = run.read_events();
  const nlohmann::json summary = train::summarize(metrics, 0.0);
  std::string job;  // the model and layout, as run_started said them (the last start: a resume's)
  for (const nlohmann::json& e : events) {
    if (e.value("event", "") == "run_started") job = e.value("job", job);
  }
  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>ntp run {0}</title></head>\n"
      "<body style='font-family:sans-serif'>\n<h1>ntp run {0}</h1>\n<p>{6}</p>\n"
      "<p>{1} steps, loss {2:.4f} &rarr; {3:.4f}, {4:.0f} tokens/s, {5:.3f} s/step</p>\n",
      run_dir.filename().string(), metrics.size(), summary["first_loss"].get<double>(),
      summary["last_loss"].get<double>(), summary["tokens_per_s"].get<double>(),
      summary["mean_step_time_s"].get<double>(), sim::escape_xml(job));
  for (const Chart& chart : run_charts(metrics, events)) html += "<div>\n" + inline_svg(chart) + "</div>\n";
  html += "</body></html>\n";
  const std::filesystem::path out = run.file("report.html");
  train::write_file_atomic(out, html);
  return out;
}

}  // namespace ntp::cli
