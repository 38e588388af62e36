#include "comm/gloo_mesh.h"

#include <chrono>
#include <cstdint>
#include <exception>

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

namespace ntp::comm {

namespace {

// Slot of the abort probe; Gloo's collectives use prefixes 0x01..0x08 and our
// point-to-point messages 0xA0 and 0xA1 (gloo_p2p.cpp).
constexpr std::uint8_t kAbortProbeSlotPrefix = 0xAF;

}  // namespace

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
