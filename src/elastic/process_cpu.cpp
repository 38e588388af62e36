#include "elastic/process_cpu.h"

#include <fstream>
#include <sstream>
#include <string>

namespace ntp::elastic {

std::optional<ProcessSample> sample_process(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so the
  // fields start after the last ')'. utime and stime are fields 14 and 15.
  const std::size_t close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(line.substr(close + 1));
  ProcessSample s;
  std::string skip;
  fields >> s.state;
  for (int field = 4; field <= 13; ++field) fields >> skip;
  std::int64_t utime = 0, stime = 0;
  if (!(fields >> utime >> stime)) return std::nullopt;
  s.cpu_ticks = utime + stime;
  return s;
}

bool stale_worker_lost(const ProcessSample& at_last_fresh_beat, const ProcessSample& now) {
  switch (now.state) {
    case 'T': case 't': case 'Z': case 'X': return true;
    default: return now.cpu_ticks <= at_last_fresh_beat.cpu_ticks;
  }
}

}  // namespace ntp::elastic
