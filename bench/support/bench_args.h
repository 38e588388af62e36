#pragma once
// What the one-off benches share: a steady clock in seconds and `--name VALUE`
// flags.
#include <chrono>
#include <string>

namespace ntp::bench {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The value after `--name`, or `fallback`.
inline std::string flag(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i] == "--" + name) return argv[i + 1];
  return fallback;
}

}  // namespace ntp::bench
