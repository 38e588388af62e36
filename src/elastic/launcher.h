#pragma once
// The local launcher behind `ntp launch` and `ntp train`: starts nproc worker
// processes of one command on this host, each with its place in the job in
// the environment (see worker_env), and supervises them:
//   - every exit is reported with its cause (exit code or signal);
//   - after the first failure the others get `straggler_timeout` to exit on
//     their own (they notice through their collective deadlines), then SIGTERM,
//     then SIGKILL after `term_grace`;
//   - SIGINT / SIGTERM / SIGHUP sent to the launcher are forwarded to every
//     worker's process group, with the same SIGKILL fallback;
//   - workers die with the launcher (PR_SET_PDEATHSIG), so none is orphaned.
// Each worker runs in its own process group, so a worker that starts children
// (a shell script) is stopped as a whole.
#include <sys/types.h>

#include <csignal>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "elastic/world.h"

namespace ntp::elastic {

// How often the launcher looks for exited workers: a worker's death is
// reported (its dead mark in the store) within this and one store write.
inline constexpr std::chrono::milliseconds kReapInterval{10};

// A worker command that cannot be executed (not found, not executable):
// names the command and the reason. No worker is left running.
class ExecError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct LaunchOptions {
  int nproc = 1;      // workers on this host
  int nnodes = 1;     // hosts in the job (each runs one launcher)
  int node_rank = 0;  // this host's index
  // Global rank of local rank 0 and the job's size, when hosts run different
  // numbers of workers (`ntp train` keeps each replica inside one host);
  // -1 / 0: node_rank × nproc and nnodes × nproc.
  int first_rank = -1;
  int world_size = 0;
  int global_rank(int local_rank) const { return (first_rank >= 0 ? first_rank : node_rank * nproc) + local_rank; }
  int world() const { return world_size > 0 ? world_size : nnodes * nproc; }
  // Rendezvous store handed to the workers as NTP_STORE: "file:DIR" (one host
  // or a shared file system) or "redis://host:port" (several hosts).
  std::string store;
  // The caller already started the store's job (node 0 of `ntp train`): the
  // launcher does not claim it again.
  bool job_started = false;
  int master_port = 0;  // MASTER_PORT for file stores; 0 = pick a free port
  std::vector<std::string> command;  // program and arguments
  // Per-rank logs (rank-N.log, stdout and stderr); empty = inherit the launcher's.
  std::filesystem::path log_dir;
  std::chrono::milliseconds straggler_timeout{10000};
  std::chrono::milliseconds term_grace{5000};
  // In-job recovery: a worker killed by a signal does not stop the others (no
  // straggler clock); the survivors reconfigure and go on. A worker that exits
  // with an error code still starts the clock. Signals are still forwarded.
  bool tolerate_failures = false;
  // With tolerate_failures: exit codes taken like a death by a signal, each
  // with the words the reports give it (`ntp train`: 4, a worker that fenced
  // itself when it could not renew its lease on the store).
  std::map<int, std::string> tolerated_exits;
  Environment extra_env;  // added to every worker's environment
  // Called about every poll interval while workers run (progress display).
  std::function<void()> on_tick;
  // Called for "worker_started" and "worker_exited" with the rank's record.
  std::function<void(const std::string& event, const struct RankExit& record)> on_event;
  // Polled every tick: local ranks whose worker has ended and must be started
  // again (a repaired slot rejoining); they get `restart_env` on top of the
  // usual environment. Their earlier records move to LaunchResult::restarted.
  std::function<std::vector<int>()> restarts;
  Environment restart_env;
  // After a SIGKILL, how long a worker may take to die. One that
  // outlives it is stuck in the kernel (uninterruptible sleep: a hung GPU
  // driver or file system) and may never die: it is reported and left behind
  // rather than waited for forever.
  std::chrono::milliseconds kill_wait{10000};
  // Whether the caller SIGKILLed this worker itself (`ntp train` fences a rank
  // whose heartbeat stopped): one still there kill_wait later is left behind
  // too.
  std::function<bool(pid_t pid)> killed;
  // Tests only: the signal sent in SIGKILL's place, so that a worker can stand
  // in for one that SIGKILL does not end.
  int kill_signal = SIGKILL;
};

struct RankExit {
  int rank = 0;
  pid_t pid = 0;
  bool running = true;
  bool exited = false;  // exited normally with `code`
  int code = 0;
  int signal = 0;       // killed by this signal
  // Ended by the launcher (after another rank failed or on a forwarded signal):
  // exited after the launcher signalled it, or killed by a signal the launcher
  // sent. A worker killed by another signal meanwhile (an outside SIGKILL
  // during the stop) is not.
  bool stopped_by_launcher = false;
  std::uint64_t signalled = 0;  // bit s: the launcher sent it signal s
  // Found stopped (SIGSTOP) when the launcher ended the job: it was continued
  // so that it could act on the signal instead of sitting out the grace.
  bool found_stopped = false;
  // Still there LaunchOptions::kill_wait after a SIGKILL (the launcher's or
  // the caller's): left behind, no longer running as far as the launcher is
  // concerned.
  bool unkillable = false;
  double runtime_s = 0;
  // Exited with one of LaunchOptions::tolerated_exits: lost like a worker
  // killed by a signal; `exit_meaning` says why in the reports.
  bool tolerated_exit = false;
  std::string exit_meaning;
  bool ok() const { return exited && code == 0; }
  // Gone without the launcher's doing: killed by a signal, or a tolerated exit.
  bool lost() const { return !running && !stopped_by_launcher && (!exited || tolerated_exit); }
  // "rank 2 (pid 4711) exited with code 3", "... killed by signal 9 (Killed)",
  // "... did not die after SIGKILL: stuck in the kernel ...; left behind".
  std::string describe() const;
};

struct LaunchResult {
  std::vector<RankExit> ranks;      // the last worker of each rank
  std::vector<RankExit> restarted;  // earlier workers of ranks started again
  std::optional<int> first_failure;  // the rank whose failure stopped the job
  int forwarded_signal = 0;          // signal received by the launcher, if any
  bool ok() const;
  // One line per rank plus the cause; empty lines for a clean run.
  std::string report() const;
};

// The environment of worker `local_rank` (besides the launcher's own):
// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, NTP_STORE,
// MASTER_ADDR, MASTER_PORT, and OMP/OPENBLAS_NUM_THREADS = cores / nproc
// unless already set. Pure apart from `hardware_threads`.
Environment worker_env(const LaunchOptions& options, int local_rank, int hardware_threads,
                       const Environment& launcher_env);

// Fills nnodes / node_rank from Slurm (SLURM_NNODES, SLURM_NODEID) when the
// launcher itself runs as one Slurm task per node and they were not given.
void apply_slurm_nodes(LaunchOptions& options, const Environment& env, bool nodes_given);

// Throws std::invalid_argument naming the option (--nproc, --nnodes,
// --node-rank, --store, --straggler-timeout, --term-grace, command) that is wrong.
void validate(const LaunchOptions& options);

// Starts the workers and waits for all of them. Blocks the calling thread;
// installs SIGINT/SIGTERM/SIGHUP handlers while it runs. Throws ExecError
// when the command cannot be executed.
LaunchResult launch(const LaunchOptions& options);

}  // namespace ntp::elastic
