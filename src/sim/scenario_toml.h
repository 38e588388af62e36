#pragma once
// Reading a scenario from TOML: the file, `--set key=value` overrides and sweep
// values all edit one toml::table, which is then turned into a validated
// Scenario. Unknown keys, wrong types and out-of-range values throw
// std::invalid_argument naming the source and the dotted key.
#include <string>

#include <toml++/toml.h>

#include "sim/scenario.h"

namespace ntp::sim {

// Parses TOML text; `source` names it in errors (a file name).
toml::table parse_scenario_text(const std::string& text, const std::string& source);

// Reads and parses a file; throws std::invalid_argument naming the file.
toml::table load_scenario_file(const std::string& path);

// A --set or --sweep value: the TOML value `text` spells, or `text` itself as a
// string when it spells none ("snapshot"). The value is the table's one entry, "v".
toml::table parse_value(const std::string& text);

// Sets the dotted key (creating tables on the way) to `value` parsed as TOML;
// text that is not a TOML value is taken as a string ("mode=snapshot").
void set_override(toml::table& table, const std::string& key, const std::string& value);

// Converts and validates. Every key not listed in docs/sim.md is rejected.
Scenario scenario_from_table(const toml::table& table, const std::string& source);

// The resolved scenario: every key with its value (defaults included), in
// the form scenario_from_table reads back to the same Scenario.
toml::table scenario_to_table(const Scenario& s);

}  // namespace ntp::sim
