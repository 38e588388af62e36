#pragma once
// The TCP mesh of a Gloo group: connecting every pair at creation, and
// failing every pair at once on abort. Gloo's own calls for these cannot be
// interrupted, so both are done here from its lower-level pieces.
#include <chrono>
#include <functional>
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

// The pair addresses each rank publishes, one record per rank.
using MeshRecords = std::vector<std::vector<char>>;

// Connects group rank `rank` to every other member, as gloo's connectFullMesh
// does, but with O(1) bytes published per rank: all of a rank's pairs listen
// on its device's one socket and differ only in a sequence number, so its
// record is the first pair's address (the full per-pair list only when the
// numbers are not consecutive). `publish` hands this rank's record to the
// rendezvous and returns every member's, by group rank. Each wait has
// `timeout`. Unlike connectFullMesh it gives up within ~50 ms once
// opts.is_dead reports a member dead, also while a pair is blocked waiting
// for its peer to connect (which gloo otherwise bounds only by 5x `timeout`):
// it throws CommError(kPeerError) naming that rank. `records` receives the
// members' records (to name peers in errors later).
std::shared_ptr<gloo::Context> connect_mesh(const std::function<MeshRecords(const std::vector<char>&)>& publish,
                                            const GroupOptions& opts, int rank,
                                            std::shared_ptr<gloo::transport::Device> device,
                                            std::chrono::milliseconds timeout, MeshRecords& records);

// Address of group rank `peer`'s pair for `rank` inside peer's mesh record
// (either form).
std::vector<char> mesh_address(const std::vector<char>& record, int rank, int peer, int size);

// Fails every connection of `context` now; safe from any thread while
// another thread is blocked in a gloo call on it. Pending sends and receives
// wake with an error and the sockets close, so peers waiting on this rank see
// the close. For a context that no earlier failure closed.
void fail_connections(gloo::Context& context);

}  // namespace ntp::comm
