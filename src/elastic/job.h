#pragma once
// A supervised launch as the `ntp` commands run it: the launcher plus its
// reporting. Every worker start and exit goes to events.jsonl (when a file is
// given) and every failure is printed the moment it happens, so no death goes
// unnoticed even while the other workers are still running.
#include <cstdio>
#include <filesystem>

#include "elastic/launcher.h"

namespace ntp::elastic {

struct JobReporting {
  std::filesystem::path events_file;  // empty = no event log
  std::FILE* failures = stderr;       // where failures are printed as they happen
  const char* prefix = "ntp launch";  // "ntp train: rank 3 (pid ...) exited with code 1"
};

LaunchResult run_job(LaunchOptions options, const JobReporting& reporting);

}  // namespace ntp::elastic
