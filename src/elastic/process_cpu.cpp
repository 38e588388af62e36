#include "elastic/process_cpu.h"

#include <time.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace ntp::elastic {

namespace {

// One /proc stat file: "pid (comm) state ppid ...". comm may hold spaces and
// parentheses, so the fields start after the last ')'; utime and stime are
// fields 14 and 15.
std::optional<ProcessSample> read_stat(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
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

}  // namespace

std::optional<ProcessSample> sample_process(int pid) {
  const std::filesystem::path dir = "/proc/" + std::to_string(pid);
  std::optional<ProcessSample> s = read_stat(dir / "stat");
  if (!s) return std::nullopt;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(dir / "task", ec)) {
    const std::optional<ProcessSample> thread = read_stat(task.path() / "stat");
    if (thread && thread->state == 'R') ++s->runnable_threads;
  }
  return s;
}

bool stale_worker_lost(const ProcessSample& at_last_fresh_beat, const ProcessSample& now) {
  switch (now.state) {
    case 'T': case 't': case 'Z': case 'X': return true;
    default: return now.runnable_threads == 0 && now.cpu_ticks <= at_last_fresh_beat.cpu_ticks;
  }
}

namespace {
double cpu_s(clockid_t clock) {
  timespec t{};
  ::clock_gettime(clock, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}
}  // namespace

double process_cpu_s() { return cpu_s(CLOCK_PROCESS_CPUTIME_ID); }
double thread_cpu_s() { return cpu_s(CLOCK_THREAD_CPUTIME_ID); }

}  // namespace ntp::elastic
