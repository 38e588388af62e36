#pragma once
// NCCL backend (compiled when the build has CUDA; see have_nccl()).
// Buffers passed to an NCCL group are device pointers on the group's device.
//
// Communicators are non-blocking (ncclConfig_t::blocking = 0): creation and
// every call are polled against the group's deadline, and a call that misses
// it aborts the communicator (ncclCommAbort) — the watchdog — and raises
// CommError(kTimeout); an asynchronous NCCL error raises kPeerError. Either
// way the group is broken; survivors re-initialize by creating the groups of
// the next epoch (a fresh ncclUniqueId is exchanged through the store).
// Call checks (GroupOptions::check_inputs) cover local arguments only.
#include <cstddef>
#include <memory>

#include "comm/group.h"

namespace ntp::comm {

// Creates an NCCL group, or throws CommError(kBadInput) in a build without
// CUDA or on a machine without a GPU.
std::unique_ptr<Group> create_nccl_group(std::shared_ptr<Store> store, const GroupOptions& opts);

// CUDA devices visible to this process (0 in a build without CUDA).
int cuda_device_count();

// Minimal device memory helpers for tests and benchmarks of the NCCL backend.
// Each throws CommError(kBadInput) in a build without CUDA.
void* device_alloc(std::size_t bytes, int device);
void device_free(void* ptr);
void copy_to_device(void* dst, const void* src, std::size_t bytes);
void copy_to_host(void* dst, const void* src, std::size_t bytes);

}  // namespace ntp::comm
