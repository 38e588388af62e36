#pragma once
// Where a worker process stands in the job, read from its environment. Two
// conventions are understood, in this order:
//   1. torchrun-style, as `ntp launch` sets it: RANK, WORLD_SIZE, LOCAL_RANK,
//      LOCAL_WORLD_SIZE, GROUP_RANK (node), NTP_STORE, MASTER_ADDR/PORT;
//   2. Slurm, when `srun` starts the workers itself: SLURM_PROCID,
//      SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID, SLURM_NNODES,
//      SLURM_TASKS_PER_NODE (e.g. "4(x2),3").
// With neither, the process is rank 0 of 1. Pure: the environment is passed in.
#include <map>
#include <string>
#include <vector>

namespace ntp::elastic {

using Environment = std::map<std::string, std::string>;

struct WorldInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  int num_nodes = 1;
  std::string store;        // NTP_STORE ("file:/dir" or "redis://host:port"); may be empty
  std::string master_addr;  // MASTER_ADDR, if set
  int master_port = 0;      // MASTER_PORT, 0 if unset
  std::string source;       // "ntp launch", "slurm" or "single process"
};

// Throws std::invalid_argument naming the variable that is malformed or
// inconsistent (e.g. RANK >= WORLD_SIZE).
WorldInfo world_from_env(const Environment& env);

// The current process environment as a map.
Environment current_environment();

// The GPU of a local rank as NVML names it: the local_rank-th entry of
// CUDA_VISIBLE_DEVICES (an index or a UUID, both of which NVML accepts) when
// it is set, else the local rank itself; NVML ignores CUDA_VISIBLE_DEVICES.
// Throws std::invalid_argument naming CUDA_VISIBLE_DEVICES when it lists too
// few GPUs.
std::string gpu_of_local_rank(const Environment& env, int local_rank);

// Expands Slurm's compressed task counts: "4(x2),3" -> {4, 4, 3}.
std::vector<int> parse_slurm_tasks_per_node(const std::string& text);

}  // namespace ntp::elastic
