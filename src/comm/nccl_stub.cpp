// Build without CUDA: the NCCL backend is absent and says so.
#include "comm/nccl_group.h"

namespace ntp::comm {

bool have_nccl() { return false; }

std::unique_ptr<Group> create_nccl_group(std::shared_ptr<Store>, const GroupOptions& opts) {
  CommErrorInfo info;
  info.kind = CommErrorKind::kBadInput;
  info.group = opts.name;
  info.epoch = opts.epoch;
  info.rank = opts.global_rank;
  info.op = "create_group";
  info.detail = "this build has no NCCL backend (configured without CUDA)";
  throw CommError(std::move(info));
}

}  // namespace ntp::comm
