#pragma once
// The picture of a training run (`ntp report RUN_DIR`, and `ntp train` at the
// end): report.html in the run directory, self-contained, with SVG charts
// drawn by the simulator's renderer (sim/svg.h):
//   - train and validation loss per step;
//   - tokens/s and step time per step;
//   - exposed gradient-sync time per step;
//   - the TP degree of every replica over wall time, with every failure,
//     recovery and rejoin marked on the same time axis.
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/svg.h"
#include "train/metrics.h"

namespace ntp::cli {

// The charts of a run from its metrics and events (pure).
std::vector<sim::Chart> run_charts(const std::vector<train::StepMetrics>& metrics,
                                   const std::vector<nlohmann::json>& events);

// Reads RUN_DIR's metrics.jsonl and events.jsonl, writes RUN_DIR/report.html
// and returns its path. Throws std::runtime_error naming a missing or
// malformed file.
std::filesystem::path write_run_report(const std::filesystem::path& run_dir);

}  // namespace ntp::cli
