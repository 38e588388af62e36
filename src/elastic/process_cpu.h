#pragma once
// What a launcher can see of its own workers in /proc: whether a process is
// stopped, and how much CPU it has had. A worker whose heartbeat went stale
// while its CPU time still advances is starved (an oversubscribed host, its
// heartbeat thread waiting for a core), not stopped or wedged in the kernel;
// fencing it would turn load into a failure. A live worker that makes no
// progress in training is still found: its peers' collectives time out and
// the agreement asks for it to be fenced.
#include <cstdint>
#include <optional>

namespace ntp::elastic {

struct ProcessSample {
  char state = '?';            // /proc/<pid>/stat: R, S, D, T (stopped), t (traced), Z, X
  std::int64_t cpu_ticks = 0;  // user + system time of all its threads, in clock ticks
  int runnable_threads = 0;    // threads in state R: running, or waiting for a core
};

// The process's state and CPU time; nullopt once it is gone (or on a system without /proc).
std::optional<ProcessSample> sample_process(int pid);

// Whether a worker whose heartbeat is stale is lost: it is stopped or a
// zombie, or none of its threads is runnable and it has had no CPU since
// `at_last_fresh_beat` was sampled. (A starved thread is runnable even when
// the clock ticks, 10 ms each, have not moved.)
bool stale_worker_lost(const ProcessSample& at_last_fresh_beat, const ProcessSample& now);

// CPU seconds this process (every thread) and this thread alone have had:
// what a phase of work cost, apart from the time spent waiting.
double process_cpu_s();
double thread_cpu_s();

}  // namespace ntp::elastic
