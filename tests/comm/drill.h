#pragma once
// Failure drills with ranks as processes (comm_peer): every survivor must
// detect a killed or stopped peer within 2x the deadline, the heartbeat must
// name it, and the survivors must complete an all-reduce in epoch 2.
#include <chrono>
#include <string>
#include <vector>

#include "comm/child_process.h"

namespace ntp::comm::testing {

// Starts `world` comm_peer processes in `mode`, logging to log_dir/<name>-rank<r>.log.
std::vector<ChildProcess> spawn_peers(const std::string& mode, const std::string& store, int world,
                                      const std::string& name, std::chrono::milliseconds timeout,
                                      const std::string& log_dir, const std::vector<std::string>& extra_args = {});
std::string log_of(const std::string& log_dir, const std::string& name, int rank);

// Runs `world` looping peers (comm_peer arguments `extra_args` added), hits
// `victim` with `sig` (SIGKILL, SIGSTOP), checks the survivors with gtest
// expectations, and returns each survivor's detection latency in ms (error
// time minus signal time, wall clock).
std::vector<long long> failure_drill(const std::string& store_spec, int sig, std::chrono::milliseconds timeout,
                                     int world = 4, int victim = 2, const std::vector<std::string>& extra_args = {});

}  // namespace ntp::comm::testing
