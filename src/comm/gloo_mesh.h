#pragma once
// The TCP mesh of a Gloo group: connecting every pair at creation, and
// failing every pair at once on abort or failure. Gloo's own calls for these cannot be
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

// The group ranks that `rank` connects to, ascending, without itself: every
// other member, or for a sparse group those 1 and 2^k ranks away either way
// around the ring of `size` (see GroupOptions::sparse) and its partners in
// `links`. Symmetric: j is a peer of i exactly when i is a peer of j.
std::vector<int> mesh_peers(int rank, int size, bool sparse, const std::vector<std::pair<int, int>>& links = {});

// Connects group rank `rank` to its mesh_peers, as gloo's connectFullMesh
// does for a full mesh: each rank publishes one record under
// mesh_key(prefix, rank), the address of its pair for each peer in peer order,
// calls `join` (the group's rendezvous, after which every record exists), and
// reads only its own address from each peer's record, in one batched read:
// O(peers) bytes per rank, not every record. Each wait has `timeout`. Unlike
// connectFullMesh it gives up within ~50 ms once opts.is_dead reports a
// member dead, also while a pair is blocked waiting for its peer to connect
// (which gloo otherwise bounds only by 5x `timeout`): it throws
// CommError(kPeerError) naming that rank. `peer_addresses` receives, by group
// rank, the address each peer's pair for this rank listens on (to name peers
// in errors later; empty for a member that is not a peer).
std::shared_ptr<gloo::Context> connect_mesh(Store& store, const std::string& prefix, const GroupOptions& opts,
                                            int rank, std::shared_ptr<gloo::transport::Device> device,
                                            std::chrono::milliseconds timeout, const std::function<void()>& join,
                                            std::vector<std::vector<char>>& peer_addresses);

std::string mesh_key(const std::string& prefix, int rank);

// Closes every connection of `context` (those it has) and fails every
// operation pending on them; safe from any thread while another thread is
// blocked in a gloo call on it. Peers waiting on this rank see the close at
// once. Every close of a group's connections goes through here: gloo's bare
// closeConnections leaves this rank's own waits waiting out their deadline.
void fail_connections(gloo::Context& context);

}  // namespace ntp::comm
