// GlooGroup's point-to-point messages over Gloo unbound buffers.
#include <array>

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "comm/gloo_group.h"
#include "comm/rendezvous.h"

namespace ntp::comm {

namespace {

// Slot prefixes of point-to-point messages; Gloo's collectives use 0x01..0x08.
constexpr std::uint8_t kSendSlotPrefix = 0xA0;
constexpr std::uint8_t kSendHeaderSlotPrefix = 0xA1;
}  // namespace

void GlooGroup::send(ConstView data, int dst, std::uint32_t tag) { exchange({P2POp::send(data, dst, tag)}); }

void GlooGroup::recv(View data, int src, std::uint32_t tag) { exchange({P2POp::recv(data, src, tag)}); }

// Point-to-point: every send and receive is posted before any is waited on.
// With check_inputs, a small header (type, count) travels ahead of each
// message, and receives are posted only after their header matched, so a
// size mismatch is named instead of misreading data.
void GlooGroup::exchange(const std::vector<P2POp>& ops) {
  guarded("exchange", [&] {
    for (const auto& op : ops) {
      const char* role = op.kind == P2POp::Kind::kSend ? "destination" : "source";
      if (op.peer < 0 || op.peer >= size() || op.peer == rank_) {
        fail(CommErrorKind::kBadInput, "exchange",
             std::string(role) + " rank " + std::to_string(op.peer) + " is invalid in a group of " +
                 std::to_string(size()));
      }
      if (!context_->getPair(op.peer)) {
        fail(CommErrorKind::kBadInput, "exchange",
             std::string(role) + " rank " + std::to_string(op.peer) +
                 " is not connected to this member of a sparse group (list the pair in GroupOptions::links)");
      }
    }
    using Buffer = std::unique_ptr<gloo::transport::UnboundBuffer>;
    const bool headers = opts_.check_inputs;
    std::vector<std::array<std::int64_t, 2>> header(ops.size());
    std::vector<Buffer> header_bufs(ops.size());
    std::vector<Buffer> data_bufs(ops.size());
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const auto& op = ops[i];
      const auto header_slot = gloo::Slot::build(kSendHeaderSlotPrefix, op.tag);
      if (headers) {
        header[i] = {static_cast<std::int64_t>(op.buffer.type), static_cast<std::int64_t>(op.buffer.count)};
        header_bufs[i] = context_->createUnboundBuffer(header[i].data(), sizeof(header[i]));
        if (op.kind == P2POp::Kind::kSend) header_bufs[i]->send(op.peer, header_slot);
        else header_bufs[i]->recv(op.peer, header_slot);
      }
      if (op.kind == P2POp::Kind::kSend && op.buffer.count > 0) {
        data_bufs[i] = context_->createUnboundBuffer(op.buffer.data, op.buffer.bytes());
        data_bufs[i]->send(op.peer, gloo::Slot::build(kSendSlotPrefix, op.tag));
      }
    }
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const auto& op = ops[i];
      if (op.kind != P2POp::Kind::kRecv) continue;
      if (headers) {
        header_bufs[i]->waitRecv(deadline());
        if (header[i][0] != static_cast<std::int64_t>(op.buffer.type) ||
            header[i][1] != static_cast<std::int64_t>(op.buffer.count)) {
          CommError error = group_error(
              opts_, CommErrorKind::kBadInput, "recv",
              "rank " + std::to_string(op.peer) + " sends " + std::to_string(header[i][1]) + " " +
                  to_string(static_cast<DataType>(header[i][0])) + " elements with tag " + std::to_string(op.tag) +
                  ", receiver expects " + std::to_string(op.buffer.count) + " " + to_string(op.buffer.type),
              opts_.ranks[static_cast<std::size_t>(op.peer)]);
          break_group(error);  // the peer's send stays pending: the group cannot go on
          throw error;
        }
      }
      if (op.buffer.count > 0) {
        data_bufs[i] = context_->createUnboundBuffer(op.buffer.data, op.buffer.bytes());
        data_bufs[i]->recv(op.peer, gloo::Slot::build(kSendSlotPrefix, op.tag));
      }
    }
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (headers && ops[i].kind == P2POp::Kind::kSend) header_bufs[i]->waitSend(deadline());
      if (!data_bufs[i]) continue;
      if (ops[i].kind == P2POp::Kind::kSend) data_bufs[i]->waitSend(deadline());
      else data_bufs[i]->waitRecv(deadline());
    }
  });
}


}  // namespace ntp::comm
