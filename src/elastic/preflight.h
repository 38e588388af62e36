#pragma once
// Checks of this host made before any worker starts, so that a job that
// cannot run here fails at once with a clear error, not half way through.
// Internal to `ntp train` (train_job.cpp, multi_host.cpp).
#include "train/config.h"

namespace ntp::elastic {

// With power.mode = "nvml", every local rank's GPU must be controllable and
// match the configured device model before any worker starts: a host without
// NVML is an error here, naming power.mode, not a worker crash later. Opening
// a RankPower changes no limit.
void check_power(const train::Config& config, int local_ranks);

// Every rank of this host listens on its Gloo groups' ports at once; a job
// that cannot fit the ephemeral range would fail half way through connecting
// (comm/port_budget.h), so it is refused before any worker starts.
void check_ports(const train::Config& config, int local_ranks, std::int64_t world);

}  // namespace ntp::elastic
