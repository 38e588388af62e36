#pragma once
// The TCP mesh of a Gloo group: connecting every pair at creation, and
// failing every pair at once on abort. Gloo's own calls for these cannot be
// interrupted, so both are done here from its lower-level pieces.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/group.h"

namespace gloo {
class Context;
namespace transport {
class Device;
}
}  // namespace gloo

namespace ntp::comm {

// Connects group rank `rank` to every other member, as gloo's connectFullMesh
// does (each rank publishes its pairs' addresses under "<prefix>mesh/<rank>",
// then connects pair by pair), with `timeout` for each wait. Unlike
// connectFullMesh it gives up within ~50 ms once opts.is_dead reports a member
// dead, also while a pair is blocked waiting for its peer to connect (which
// gloo otherwise bounds only by 5x `timeout`): it throws CommError(kPeerError)
// naming that rank.
std::shared_ptr<gloo::Context> connect_mesh(Store& store, const std::string& prefix, const GroupOptions& opts,
                                            int rank, std::shared_ptr<gloo::transport::Device> device,
                                            std::chrono::milliseconds timeout);

// Address of group rank `peer`'s pair for `rank` inside peer's mesh record.
std::vector<char> mesh_address(const std::vector<char>& record, int rank, int peer, int size);

// Fails every connection of `context` now; safe from any thread while
// another thread is blocked in a gloo call on it. Pending sends and receives
// wake with an error and the sockets close, so peers waiting on this rank see
// the close. For a context that no earlier failure closed.
void fail_connections(gloo::Context& context);

}  // namespace ntp::comm
