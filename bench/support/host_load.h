#pragma once
// What the benchmarks print beside their figures: the host's load average, so
// that wall times measured on a shared machine can be read for what they are.
#include <cstdio>
#include <cstdlib>
#include <string>

namespace ntp::bench {

// "1-min 5-min 15-min" load averages, or "unknown".
inline std::string load_average() {
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) != 3) return "unknown";
  char text[64];
  std::snprintf(text, sizeof text, "%.2f %.2f %.2f", load[0], load[1], load[2]);
  return text;
}

}  // namespace ntp::bench
