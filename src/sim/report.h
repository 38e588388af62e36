#pragma once
// What a study produces for users: a JSON summary, CSV tables, SVG charts and
// a short text table. The builders are pure (they return strings / charts);
// write_report() is the only function that touches the file system.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/study.h"
#include "sim/svg.h"

namespace ntp::sim {

nlohmann::json study_json(const Study& study);

std::string step_model_csv(const Study& study);       // healthy step-time breakdown per point
std::string snapshot_csv(const Study& study);         // one row per point, fraction and policy
std::string timeline_summary_csv(const Study& study); // one row per point and policy
std::string timeline_series_csv(const Study& study);  // one row per point and time bucket

// Charts a user can put in a report. Each returns an empty optional-like
// chart (no series) when the study has nothing to plot for it.
Chart loss_vs_failed_fraction_chart(const StudyPoint& point);
Chart failure_timeline_chart(const StudyPoint& point);
Chart sweep_chart(const Study& study);          // goodput loss vs the swept value
// Spares for zero pause per policy and ntp-pw's boost energy vs the swept value.
Chart spares_vs_boost_chart(const Study& study);
Chart spares_vs_pause_chart(const Study& study);  // when the sweep key is spares.domains
// Goodput under fail-slow alone per treatment vs the swept value (failslow on).
Chart failslow_chart(const Study& study);
// The busiest GPU's compute at each TP degree k relative to TP n, for
// parallelism.align 1 and 64, next to the FLOP ratio n/k.
Chart compute_vs_tp_chart(const Scenario& scenario);

std::string text_summary(const Study& study);

// Readies `dir` for write_report before anything runs: creates it, refuses a
// folder with files in it unless `force` (std::invalid_argument naming
// --out), and proves it writable (std::runtime_error naming the path).
void prepare_output_dir(const std::string& dir, bool force);

// Writes summary.json, the CSVs and the SVGs into `dir` (created if needed);
// returns the paths written. Throws std::runtime_error naming the path.
std::vector<std::string> write_report(const Study& study, const std::string& dir);

}  // namespace ntp::sim
