#pragma once
// One logger for the diagnostics of every `ntp` command: spdlog's default
// logger, on stderr. Results (tables, JSON, the progress line) stay on
// stdout and are not log messages. The level comes from NTP_LOG_LEVEL
// (trace, debug, info, warn, error, off; default info), then from --quiet
// (warnings and errors only) or --verbose (debug), which every command
// accepts before a `--`. Worker processes inherit NTP_LOG_LEVEL.
#include <string>
#include <vector>

namespace ntp::cli {

// Sets the logger up and returns `args` without --quiet / --verbose (those
// after a `--` belong to a worker command and stay). Throws
// std::invalid_argument naming NTP_LOG_LEVEL or the flags when they are bad.
std::vector<std::string> setup_logging(const std::vector<std::string>& args);

}  // namespace ntp::cli
