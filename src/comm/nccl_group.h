#pragma once
// NCCL backend (compiled when the build has CUDA; see have_nccl()).
// Buffers passed to an NCCL group are device pointers on the group's device.
#include <memory>

#include "comm/group.h"

namespace ntp::comm {

// Creates an NCCL group, or throws CommError(kBadInput) in a build without
// CUDA or on a machine without a GPU.
std::unique_ptr<Group> create_nccl_group(std::shared_ptr<Store> store, const GroupOptions& opts);

}  // namespace ntp::comm
