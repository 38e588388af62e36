#pragma once
// One worker process of `ntp train`: the step loop, driven through the
// recovery protocol (elastic/recovery.h) when elastic.recover is on, with a
// heartbeat to the store for the launcher's hang detection and the failures
// of test.failures / test.chaos injected as real signals.
#include <filesystem>

#include "train/ntp_trainer.h"

namespace ntp::elastic {

// Exit code of a worker whose units no survivor holds any more (the job
// cannot go on in-job): `ntp train` then exits 3 as well.
inline constexpr int kExitUnitsLost = 3;
// Exit code of a worker that fenced itself: it could not renew its lease on
// the job's store within deadline.lease_s (cut off from it), so the others
// may go on without it (docs/launch.md, "Partitions").
inline constexpr int kExitSelfFenced = 4;

// Runs the worker's whole life: reads the data, plans the job (its `nnodes`
// hosts) and runs rank options.rank of it; returns its exit code. Throws on
// errors (exit 1 from main).
int run_worker(const train::Config& config, const std::filesystem::path& run_dir,
               const train::WorkerOptions& options, int nnodes);

// The worker side (`ntp train --worker --run-dir DIR`, started by the
// launcher): reads DIR/config.toml and its place from the environment
// (world.h), then runs one rank of the NTP trainer (run_worker). Returns the
// exit code.
int run_train_worker(const std::filesystem::path& run_dir);

}  // namespace ntp::elastic
