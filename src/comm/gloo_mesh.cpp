#include "comm/gloo_mesh.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <cstdint>
#include <exception>

#include <gloo/context.h>
#include <gloo/transport/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/unbound_buffer.h>

#include "comm/gloo_watched.h"
#include "comm/rendezvous.h"

namespace ntp::comm {

namespace {

// gloo::Context keeps its device and transport context protected; gloo's own
// connectFullMesh fills them from a derived class, and so do we.
class MeshContext : public gloo::Context {
 public:
  using gloo::Context::Context;
  void adopt(std::shared_ptr<gloo::transport::Device> device, std::shared_ptr<gloo::transport::Context> transport) {
    device_ = std::move(device);
    transportContext_ = std::move(transport);
  }
};

// Size of one address in a record.
std::size_t address_width() { return gloo::transport::tcp::Address().bytes().size(); }

// Where `rank`'s address sits in `peer`'s record, in addresses.
std::size_t slot_in_record(int peer, int rank, const GroupOptions& opts) {
  if (!opts.sparse) return static_cast<std::size_t>(rank < peer ? rank : rank - 1);  // every rank but the owner
  const std::vector<int> owners_peers = mesh_peers(peer, static_cast<int>(opts.ranks.size()), true, opts.links);
  const auto at = std::lower_bound(owners_peers.begin(), owners_peers.end(), rank);
  return static_cast<std::size_t>(at - owners_peers.begin());  // present: the peer sets are symmetric
}

}  // namespace

std::vector<int> mesh_peers(int rank, int size, bool sparse, const std::vector<std::pair<int, int>>& links) {
  std::vector<int> peers;
  if (!sparse) {
    for (int i = 0; i < size; ++i) {
      if (i != rank) peers.push_back(i);
    }
    return peers;
  }
  for (int d = 1; d < size; d *= 2) {
    peers.push_back((rank + d) % size);
    peers.push_back((rank - d + size) % size);
  }
  for (const auto& [a, b] : links) {
    if (a == rank && b != rank) peers.push_back(b);
    if (b == rank && a != rank) peers.push_back(a);
  }
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  return peers;
}

std::string mesh_key(const std::string& prefix, int rank) { return prefix + "mesh/" + std::to_string(rank); }

std::shared_ptr<gloo::Context> connect_mesh(Store& store, const std::string& prefix, const GroupOptions& opts,
                                            int rank, std::shared_ptr<gloo::transport::Device> device,
                                            std::chrono::milliseconds timeout, const std::function<void()>& join,
                                            std::vector<std::vector<char>>& peer_addresses) {
  const int size = static_cast<int>(opts.ranks.size());
  const std::vector<int> peers = mesh_peers(rank, size, opts.sparse, opts.links);
  auto transport = create_watched_context(device, rank, size, timeout);  // waits end when a pair fails
  std::vector<char> record;
  for (int peer : peers) {
    const auto address = transport->createPair(peer)->address().bytes();
    record.insert(record.end(), address.begin(), address.end());
  }
  store.set(mesh_key(prefix, rank), record);
  join();

  const std::size_t width = address_width();
  std::vector<Store::Slice> slices;
  for (int peer : peers) {
    slices.push_back({mesh_key(prefix, peer), slot_in_record(peer, rank, opts) * width, width});
  }
  const auto found = store.get_slices(slices);
  peer_addresses.assign(static_cast<std::size_t>(size), {});
  for (std::size_t k = 0; k < peers.size(); ++k) {
    const int peer = peers[k];
    if (!found[k] || found[k]->size() != width) {
      throw group_error(opts, CommErrorKind::kPeerError, "create_group",
                        "rank " + std::to_string(opts.ranks[static_cast<std::size_t>(peer)]) +
                            " joined without a usable address record in " + store.describe(),
                        opts.ranks[static_cast<std::size_t>(peer)]);
    }
    peer_addresses[static_cast<std::size_t>(peer)] = *found[k];
  }

  // Every pair exists now, so the watch may close them from its thread: a
  // connect waiting for its peer then returns (closed counts as settled) or
  // throws, and the loop below reports the dead rank.
  DeathWatch watch(opts, "connecting", [&](const CommError&) {
    for (int peer : peers) transport->getPair(peer)->close();
  });
  for (int peer : peers) {
    try {
      transport->getPair(peer)->connect(peer_addresses[static_cast<std::size_t>(peer)]);
    } catch (const std::exception&) {
      watch.throw_if_fired();  // the watch broke this connect: name the dead rank
      throw;
    }
  }
  watch.stop();
  watch.throw_if_fired();  // fired after the last connect: the pairs are failed
  arm_watched_context(*transport, peers);

  auto context = std::make_shared<MeshContext>(rank, size);
  context->setTimeout(timeout);
  context->adopt(std::move(device), std::move(transport));
  return context;
}

// Gloo has no public call that fails a pair, and its Pair::close only closes
// the socket (hard: peers see a reset at once): the operations pending on the
// pair, and its sentinel (gloo_watched.h), are left waiting, so a call of
// this rank on another thread would sit out its whole deadline on a pair
// nobody can complete any more. But a wait on a buffer that times out fails
// every pair of its context (tcp Context::signalException: each pair wakes
// its pending buffers with an error, also a pair already closed), from the
// waiting thread and under the pairs' locks. A zero wait on a buffer with
// nothing posted takes that path at once, after the close, whatever state the
// pairs are in.
void fail_connections(gloo::Context& context) {
  try {
    context.closeConnections();
  } catch (const std::exception&) {
    // Already closed.
  }
  char byte = 0;
  auto probe = context.createUnboundBuffer(&byte, sizeof(byte));
  try {
    probe->waitRecv(std::chrono::milliseconds(0));
  } catch (const std::exception&) {
    // The timeout we asked for.
  }
}

}  // namespace ntp::comm
