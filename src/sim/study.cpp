#include "sim/study.h"

#include <sstream>
#include <stdexcept>

#include "sim/pricing.h"
#include "sim/scenario_toml.h"
#include "sim/trace.h"

namespace ntp::sim {

SweepSpec parse_sweep_flag(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
    throw std::invalid_argument("--sweep '" + text + "': expected key=v1,v2,...");
  }
  SweepSpec s;
  s.key = text.substr(0, eq);
  std::stringstream in(text.substr(eq + 1));
  for (std::string v; std::getline(in, v, ',');) {
    if (v.empty()) throw std::invalid_argument("--sweep " + s.key + ": empty value in the list");
    s.values.push_back(v);
  }
  return s;
}

SweepSpec sweep_from_table(const toml::table& table, const std::string& source) {
  SweepSpec s;
  const toml::node* node = table.get("sweep");
  if (!node) return s;
  const toml::table* t = node->as_table();
  if (!t) throw std::invalid_argument(source + ": sweep: expected a table");
  for (const auto& [k, v] : *t) {
    if (k.str() != "key" && k.str() != "values") {
      throw std::invalid_argument(source + ": sweep." + std::string(k.str()) + ": unknown key");
    }
  }
  const auto key = t->get_as<std::string>("key");
  const toml::array* values = t->get_as<toml::array>("values");
  if (!key) throw std::invalid_argument(source + ": sweep.key: expected a string");
  if (!values || values->empty()) {
    throw std::invalid_argument(source + ": sweep.values: expected a non-empty array");
  }
  s.key = key->get();
  for (const toml::node& v : *values) {
    // A string is kept bare, as --sweep writes it, unless bare it would read
    // as another type ("8").
    const auto text = v.value_exact<std::string>();
    if (text && parse_value(*text).get("v")->is_string()) {
      s.values.push_back(*text);
      continue;
    }
    std::ostringstream os;
    v.visit([&](const auto& x) { os << x; });
    s.values.push_back(os.str());
  }
  return s;
}

namespace {

StudyPoint run_point(const toml::table& table, const std::string& source, std::string value) {
  StudyPoint point;
  point.sweep_value = std::move(value);
  point.scenario = scenario_from_table(table, source);
  const Scenario& s = point.scenario;
  const Pricing pricing(s);
  point.step = pricing.model().healthy();
  point.pause = pricing.pause();
  if (s.run.mode == Mode::kSnapshot) {
    point.snapshot = run_snapshot(s, pricing);
    return point;
  }
  std::vector<TraceFailure> trace;
  if (!s.failures.trace.empty()) trace = load_trace(s.failures.trace, s.cluster.gpus);
  point.timeline = run_timeline(s, pricing, s.failures.trace.empty() ? nullptr : &trace);
  return point;
}

// The scenario as run, resolved (every key with its value; a sweep's first
// value), with the sweep as a [sweep] table: values are written as the TOML
// they were parsed as, so strings come back quoted.
std::string resolved_toml(const Scenario& s, const SweepSpec& sweep) {
  toml::table as_run = scenario_to_table(s);
  if (!sweep.key.empty()) {
    toml::array values;
    for (const std::string& v : sweep.values) values.push_back(std::move(*parse_value(v).get("v")));
    as_run.insert_or_assign("sweep", toml::table{{"key", sweep.key}, {"values", std::move(values)}});
  }
  std::ostringstream text;
  text << as_run;
  return text.str() + "\n";
}

}  // namespace

Study run_study(const toml::table& table, const std::string& source, const SweepSpec& sweep) {
  Study study;
  study.source = source;
  // One study is one mode over one set of policies: its tables and charts have
  // a column per policy and one layout per mode.
  for (const char* fixed : {"run.mode", "policies.compare"}) {
    if (sweep.key == fixed) {
      throw std::invalid_argument("sweep: " + sweep.key +
                                  " cannot be swept (one study is one mode over one set of "
                                  "policies); run the study once per value");
    }
  }
  study.sweep_key = sweep.key;
  if (sweep.key.empty()) {
    study.points.push_back(run_point(table, source, ""));
  }
  for (const std::string& value : sweep.values) {
    toml::table copy = table;
    set_override(copy, sweep.key, value);
    study.points.push_back(run_point(copy, source + " [" + sweep.key + "=" + value + "]", value));
  }
  study.scenario_toml = resolved_toml(study.points.front().scenario, sweep);
  return study;
}

}  // namespace ntp::sim
