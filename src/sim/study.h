#pragma once
// A study: one scenario, optionally swept over one key, run in its mode at
// every sweep value. This is what `ntp sim run` executes.
#include <optional>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "sim/reconfig_pause.h"
#include "sim/scenario.h"
#include "sim/snapshot.h"
#include "sim/step_model.h"
#include "sim/timeline.h"

namespace ntp::sim {

struct SweepSpec {
  std::string key;                  // dotted scenario key, e.g. "spares.domains"
  std::vector<std::string> values;  // TOML value texts, e.g. {"0", "4", "8"}
};

// "key=v1,v2,..." (the --sweep flag). Throws std::invalid_argument.
SweepSpec parse_sweep_flag(const std::string& text);
// The optional [sweep] table of a scenario (key = "...", values = [...]);
// empty key when there is none.
SweepSpec sweep_from_table(const toml::table& table, const std::string& source);

struct StudyPoint {
  std::string sweep_value;  // TOML text of the value ("" without a sweep)
  Scenario scenario;
  StepBreakdown step;
  ReconfigPause pause;
  std::optional<SnapshotResult> snapshot;
  std::optional<TimelineResult> timeline;
};

struct Study {
  std::string source;
  std::string scenario_toml;  // the scenario as run (file + overrides), to rerun it
  std::string sweep_key;
  std::vector<StudyPoint> points;
};

// Applies each sweep value to a copy of `table`, validates, and runs. A failure
// trace named by the scenario is read here (the only file this touches).
Study run_study(const toml::table& table, const std::string& source, const SweepSpec& sweep);

}  // namespace ntp::sim
