// Build without CUDA: the NCCL backend is absent and says so.
#include "comm/nccl_group.h"
#include "comm/rendezvous.h"

namespace ntp::comm {

namespace {
[[noreturn]] void no_cuda(const std::string& op) {
  throw_bad_input(op, "this build has no NCCL backend (configured without CUDA)");
}
}  // namespace

bool have_nccl() { return false; }
int cuda_device_count() { return 0; }

std::unique_ptr<Group> create_nccl_group(std::shared_ptr<Store>, const GroupOptions& opts) {
  throw group_error(opts, CommErrorKind::kBadInput, "create_group",
                    "this build has no NCCL backend (configured without CUDA)");
}

void* device_alloc(std::size_t, int) { no_cuda("device_alloc"); }
void device_free(void*) {}
void copy_to_device(void*, const void*, std::size_t) { no_cuda("copy_to_device"); }
void copy_to_host(void*, const void*, std::size_t) { no_cuda("copy_to_host"); }

}  // namespace ntp::comm
