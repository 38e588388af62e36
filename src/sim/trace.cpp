#include "sim/trace.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ntp::sim {
namespace {

double field(const std::string& text, const std::string& where, const char* name) {
  try {
    std::size_t used = 0;
    const double v = std::stod(text, &used);
    if (used != text.size() || !std::isfinite(v) || v < 0) throw std::invalid_argument(name);
    return v;
  } catch (const std::exception&) {
    throw std::invalid_argument(where + ": " + name + " '" + text + "' is not a number >= 0");
  }
}

}  // namespace

std::vector<TraceFailure> parse_trace(const std::string& text, const std::string& source, int gpus) {
  std::vector<TraceFailure> out;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    line.erase(std::remove(line.begin(), line.end(), '\r'), line.end());
    line.erase(std::remove(line.begin(), line.end(), ' '), line.end());
    if (line.empty() || line[0] == '#' || line == "hours,gpu,repair_hours") continue;
    const std::string where = source + ":" + std::to_string(number);
    std::vector<std::string> cells;
    std::stringstream cells_in(line);
    for (std::string cell; std::getline(cells_in, cell, ',');) cells.push_back(cell);
    if (cells.size() != 3) throw std::invalid_argument(where + ": expected hours,gpu,repair_hours");
    const double gpu = field(cells[1], where, "gpu");
    if (gpu != std::floor(gpu) || gpu >= gpus) {
      throw std::invalid_argument(where + ": gpu " + cells[1] + " is not an index in [0, " +
                                  std::to_string(gpus) + ")");
    }
    out.push_back({field(cells[0], where, "hours"), static_cast<int>(gpu),
                   field(cells[2], where, "repair_hours")});
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const TraceFailure& a, const TraceFailure& b) { return a.hours < b.hours; });
  return out;
}

std::vector<TraceFailure> load_trace(const std::string& path, int gpus) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument(path + ": cannot open failure trace");
  std::stringstream buf;
  buf << in.rdbuf();
  return parse_trace(buf.str(), path, gpus);
}

}  // namespace ntp::sim
