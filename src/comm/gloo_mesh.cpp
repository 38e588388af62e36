#include "comm/gloo_mesh.h"

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
#include <gloo/types.h>

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

// Slot of the abort probe; Gloo's collectives use prefixes 0x01..0x08 and our
// point-to-point messages 0xA0 and 0xA1 (gloo_p2p.cpp).
constexpr std::uint8_t kAbortProbeSlotPrefix = 0xAF;

// A record is one address per other rank, in rank order, skipping its
// owner, or just the first of them when the others follow by sequence number.
std::vector<char> mesh_record(gloo::transport::Context& transport, int rank, int size) {
  std::vector<char> record;
  bool consecutive = true;
  gloo::transport::tcp::Address first;
  for (int i = 0, index = 0; i < size; ++i) {
    if (i == rank) continue;
    const auto bytes = transport.createPair(i)->address().bytes();
    const gloo::transport::tcp::Address address(bytes);
    if (index == 0) first = address;
    consecutive = consecutive && address.getSeq() == first.getSeq() + index &&
                  std::memcmp(&address.getSockaddr(), &first.getSockaddr(), sizeof(sockaddr_storage)) == 0;
    record.insert(record.end(), bytes.begin(), bytes.end());
    ++index;
  }
  if (consecutive && size > 1) record.resize(record.size() / static_cast<std::size_t>(size - 1));
  return record;
}

}  // namespace

std::vector<char> mesh_address(const std::vector<char>& record, int rank, int peer, int size) {
  const std::size_t width = gloo::transport::tcp::Address().bytes().size();
  const std::size_t index = static_cast<std::size_t>(rank < peer ? rank : rank - 1);
  if (record.size() == width) {
    const gloo::transport::tcp::Address first(record);
    return gloo::transport::tcp::Address(first.getSockaddr(), first.getSeq() + static_cast<ssize_t>(index)).bytes();
  }
  if (record.size() != width * static_cast<std::size_t>(size - 1)) {
    throw std::runtime_error("mesh record of rank " + std::to_string(peer) + " has " +
                             std::to_string(record.size()) + " bytes");
  }
  const auto begin = record.begin() + static_cast<std::ptrdiff_t>(index * width);
  return {begin, begin + static_cast<std::ptrdiff_t>(width)};
}

std::shared_ptr<gloo::Context> connect_mesh(const std::function<MeshRecords(const std::vector<char>&)>& publish,
                                            const GroupOptions& opts, int rank,
                                            std::shared_ptr<gloo::transport::Device> device,
                                            std::chrono::milliseconds timeout, MeshRecords& records) {
  const int size = static_cast<int>(opts.ranks.size());
  auto transport = device->createContext(rank, size);
  transport->setTimeout(timeout);
  records = publish(mesh_record(*transport, rank, size));

  // Every pair exists now, so the watch may close them from its thread: a
  // connect waiting for its peer then returns (closed counts as settled) or
  // throws, and the loop below reports the dead rank.
  DeathWatch watch(opts, "connecting", [&](const CommError&) {
    for (int i = 0; i < size; ++i) {
      if (i != rank) transport->getPair(i)->close();
    }
  });
  for (int i = 0; i < size; ++i) {
    if (i == rank) continue;
    try {
      transport->getPair(i)->connect(mesh_address(records[static_cast<std::size_t>(i)], rank, i, size));
    } catch (const std::exception&) {
      watch.throw_if_fired();  // the watch broke this connect: name the dead rank
      throw;
    }
  }
  watch.stop();
  watch.throw_if_fired();  // fired after the last connect: the pairs are failed

  auto context = std::make_shared<MeshContext>(rank, size);
  context->setTimeout(timeout);
  context->adopt(std::move(device), std::move(transport));
  return context;
}

// Gloo has no public call that fails a pair, but when a wait on a buffer
// times out it fails every pair of the context (tcp Context::signalException:
// each pair wakes its pending buffers with an error and closes its socket),
// from the waiting thread and under the pairs' locks. A receive that nobody
// will send to, waited on with a zero timeout, takes that path now. It needs
// one pair that still accepts a receive; closing the connections afterwards
// covers the case where none does.
void fail_connections(gloo::Context& context) {
  char byte = 0;
  auto probe = context.createUnboundBuffer(&byte, sizeof(byte));
  for (int peer = 0; peer < context.size; ++peer) {
    if (peer == context.rank) continue;
    try {
      probe->recv(peer, gloo::Slot::build(kAbortProbeSlotPrefix, 0));
    } catch (const std::exception&) {
      continue;  // this pair failed already
    }
    try {
      probe->waitRecv(std::chrono::milliseconds(0));
    } catch (const std::exception&) {
      // The timeout we asked for.
    }
    break;
  }
  try {
    context.closeConnections();
  } catch (const std::exception&) {
    // Already closed.
  }
}

}  // namespace ntp::comm
