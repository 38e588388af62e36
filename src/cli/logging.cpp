#include "cli/logging.h"

#include <cstdlib>
#include <stdexcept>
#include <utility>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace ntp::cli {
namespace {

spdlog::level::level_enum level_from_env() {
  const char* text = std::getenv("NTP_LOG_LEVEL");
  if (text == nullptr || *text == '\0') return spdlog::level::info;
  const std::string name = text;
  const std::pair<const char*, spdlog::level::level_enum> levels[] = {
      {"trace", spdlog::level::trace}, {"debug", spdlog::level::debug}, {"info", spdlog::level::info},
      {"warn", spdlog::level::warn},   {"error", spdlog::level::err},   {"off", spdlog::level::off}};
  for (const auto& [word, level] : levels) {
    if (name == word) return level;
  }
  throw std::invalid_argument("NTP_LOG_LEVEL='" + name + "': expected trace, debug, info, warn, error or off");
}

}  // namespace

std::vector<std::string> setup_logging(const std::vector<std::string>& args) {
  spdlog::level::level_enum level = level_from_env();
  std::vector<std::string> rest;
  bool quiet = false;
  bool verbose = false;
  bool command = false;  // after `--`: a worker command's own arguments
  for (const std::string& arg : args) {
    command = command || arg == "--";
    if (!command && arg == "--quiet") {
      quiet = true;
    } else if (!command && arg == "--verbose") {
      verbose = true;
    } else {
      rest.push_back(arg);
    }
  }
  if (quiet && verbose) throw std::invalid_argument("--quiet and --verbose: choose one");
  if (quiet) level = spdlog::level::warn;
  if (verbose) level = spdlog::level::debug;
  auto logger = spdlog::stderr_logger_mt("ntp");
  logger->set_pattern("%v");  // the messages name their command ("ntp launch: ...")
  logger->set_level(level);
  logger->flush_on(spdlog::level::trace);  // interleave in order with the progress on stdout
  spdlog::set_default_logger(logger);
  return rest;
}

}  // namespace ntp::cli
