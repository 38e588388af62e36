#pragma once
// A failure trace replaces the sampled failure process: one failure per line,
//   hours,gpu,repair_hours
// (time since the start of the run, GPU index in [0, gpus), hours until it is
// back). Lines starting with '#' and a first line `hours,gpu,repair_hours` are
// skipped. Format: docs/sim.md.
#include <string>
#include <vector>

namespace ntp::sim {

struct TraceFailure {
  double hours = 0;
  int gpu = 0;
  double repair_hours = 0;
};

// Parses trace text; `source` names it in errors ("trace.csv:12: ...").
std::vector<TraceFailure> parse_trace(const std::string& text, const std::string& source, int gpus);
std::vector<TraceFailure> load_trace(const std::string& path, int gpus);

}  // namespace ntp::sim
