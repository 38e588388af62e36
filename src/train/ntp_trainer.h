#pragma once
// The multi-process NTP trainer: one process per active slot of every
// training replica. A rank computes its replica's share of the global batch
// with the units its slot holds in the replica layout (Megatron TP inside the
// replica over the TP group), then runs the NTP gradient sync (grad_sync.h)
// and AdamW on its units. Everything derived from membership — the place of
// the rank, layouts, groups, the batch split — comes from one JobPlan value,
// built from the configuration at start.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "layout/job_layout.h"
#include "train/config.h"

namespace ntp::train {

struct RankPlace {
  int replica = 0;
  int slot = 0;
  bool operator==(const RankPlace&) const = default;
};

// The processes of a job: the active slots of every training replica,
// replica-major, slots ascending. Global rank i is places[i].
std::vector<RankPlace> job_places(const ParallelConfig& parallel);

// The layout library's view of the job for `units` units of one kind.
layout::JobConfig job_config(const ParallelConfig& parallel, std::int64_t units);

// Everything about the job that can be wrong before a process starts: the
// data, the model against the data, and the layouts of every unit kind (e.g.
// fewer heads than the active slots of a replica). Throws ConfigError naming
// the key. Reads the data (`run_dir` hosts the built-in corpus).
void check_job(const Config& config, const std::filesystem::path& run_dir);

struct WorkerOptions {
  int rank = 0;
  int world_size = 1;
  std::string store;  // "file:DIR" or "redis://host:port"
  // This rank's GPU for power.mode = "nvml": an NVML index or UUID.
  std::string gpu;
  // Test hook (--verify must catch it): this global rank mis-pairs two head
  // units in its sync buffer. -1 = off.
  int mispair_rank = -1;
};

// Runs one rank of the job described by the run directory's config.toml.
// Rank 0 writes metrics.jsonl, schedule.jsonl, model.bin and trace.json;
// every rank writes its events and its trace fragment. With power.mode != off
// the rank's GPU limit follows the configuration's power plan and is restored
// at exit, after an error and on SIGTERM / SIGINT (power::RankPower).
void run_ntp_worker(const Config& config, const std::filesystem::path& run_dir,
                    const WorkerOptions& options);

}  // namespace ntp::train
