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
  if (s.run.mode == Mode::kSnapshot) {
    point.snapshot = run_snapshot(s, pricing);
    return point;
  }
  std::vector<TraceFailure> trace;
  if (!s.failures.trace.empty()) trace = load_trace(s.failures.trace, s.cluster.gpus);
  point.timeline = run_timeline(s, pricing, s.failures.trace.empty() ? nullptr : &trace);
  return point;
}

}  // namespace

Study run_study(const toml::table& table, const std::string& source, const SweepSpec& sweep) {
  Study study;
  study.source = source;
  std::ostringstream text;
  text << table;
  study.scenario_toml = text.str() + "\n";
  if (!sweep.key.empty()) {
    std::ostringstream sweep_text;
    sweep_text << toml::table{{"sweep", toml::table{{"key", sweep.key}}}};
    study.scenario_toml += sweep_text.str() + "\nvalues = [" ;
    for (std::size_t i = 0; i < sweep.values.size(); ++i) {
      study.scenario_toml += (i ? ", " : "") + sweep.values[i];
    }
    study.scenario_toml += "]\n";
  }
  study.sweep_key = sweep.key;
  if (sweep.key.empty()) {
    study.points.push_back(run_point(table, source, ""));
    return study;
  }
  for (const std::string& value : sweep.values) {
    toml::table copy = table;
    set_override(copy, sweep.key, value);
    study.points.push_back(run_point(copy, source + " [" + sweep.key + "=" + value + "]", value));
  }
  return study;
}

}  // namespace ntp::sim
