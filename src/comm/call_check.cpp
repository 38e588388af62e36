#include "comm/call_check.h"

#include <sstream>

namespace ntp::comm {

const char* to_string(CallOp op) {
  switch (op) {
    case CallOp::kAllReduce: return "all_reduce";
    case CallOp::kAllGather: return "all_gather";
    case CallOp::kAllGatherV: return "all_gather_v";
    case CallOp::kReduceScatter: return "reduce_scatter";
    case CallOp::kAllToAllV: return "all_to_all_v";
    case CallOp::kBroadcast: return "broadcast";
    case CallOp::kBarrier: return "barrier";
  }
  return "?";
}

namespace {

constexpr std::size_t kFixedWords = 6;
constexpr std::int64_t kMagic = 0x4e5450;  // catches a peer that sent something else

struct Decoded {
  std::int64_t magic, op, type, count, aux, ok;
  const std::int64_t* counts;
  const std::int64_t* recv;
};

Decoded decode(const std::vector<std::int64_t>& all, int size, int rank) {
  const std::int64_t* w = all.data() + static_cast<std::size_t>(rank) * descriptor_words(size);
  return Decoded{w[0], w[1], w[2], w[3], w[4], w[5], w + kFixedWords, w + kFixedWords + size};
}

std::string describe(const Decoded& d) {
  std::ostringstream out;
  out << to_string(static_cast<CallOp>(d.op)) << "(" << to_string(static_cast<DataType>(d.type)) << ", "
      << d.count << " elements";
  if (static_cast<CallOp>(d.op) == CallOp::kBroadcast) out << ", root " << d.aux;
  out << ")";
  return out.str();
}

}  // namespace

std::size_t descriptor_words(int group_size) { return kFixedWords + 2 * static_cast<std::size_t>(group_size); }

std::vector<std::int64_t> encode(const CallDescriptor& call, int group_size) {
  std::vector<std::int64_t> words(descriptor_words(group_size), 0);
  words[0] = kMagic;
  words[1] = static_cast<std::int64_t>(call.op);
  words[2] = static_cast<std::int64_t>(call.type);
  words[3] = static_cast<std::int64_t>(call.count);
  words[4] = call.aux;
  words[5] = call.local_ok ? 1 : 0;
  for (std::size_t i = 0; i < call.counts.size() && i < static_cast<std::size_t>(group_size); ++i) {
    words[kFixedWords + i] = static_cast<std::int64_t>(call.counts[i]);
  }
  for (std::size_t i = 0; i < call.recv_counts.size() && i < static_cast<std::size_t>(group_size); ++i) {
    words[kFixedWords + group_size + i] = static_cast<std::int64_t>(call.recv_counts[i]);
  }
  return words;
}

Mismatch find_mismatch(const std::vector<std::int64_t>& gathered, int size) {
  const Decoded first = decode(gathered, size, 0);
  for (int r = 0; r < size; ++r) {
    const Decoded d = decode(gathered, size, r);
    if (d.magic != kMagic) return {r, "rank " + std::to_string(r) + " sent a malformed call descriptor"};
    if (d.ok == 0) return {r, "rank " + std::to_string(r) + " passed invalid arguments to " + describe(d)};
  }
  for (int r = 1; r < size; ++r) {
    const Decoded d = decode(gathered, size, r);
    const auto op = static_cast<CallOp>(first.op);
    bool same = d.op == first.op && d.type == first.type && d.aux == first.aux;
    // Counts must match except where the -v forms let them differ per rank.
    if (op == CallOp::kAllReduce || op == CallOp::kAllGather || op == CallOp::kBroadcast) {
      same = same && d.count == first.count;
    }
    if (op == CallOp::kAllGatherV || op == CallOp::kReduceScatter) {
      for (int i = 0; i < size; ++i) same = same && d.counts[i] == first.counts[i];
    }
    if (!same) {
      return {r, "rank " + std::to_string(r) + " called " + describe(d) + " but rank 0 called " + describe(first)};
    }
  }
  if (static_cast<CallOp>(first.op) == CallOp::kAllGatherV) {
    for (int r = 0; r < size; ++r) {
      const Decoded d = decode(gathered, size, r);
      if (d.count != first.counts[r]) {
        return {r, "rank " + std::to_string(r) + " contributes " + std::to_string(d.count) +
                       " elements but the counts say " + std::to_string(first.counts[r])};
      }
    }
  }
  if (static_cast<CallOp>(first.op) == CallOp::kAllToAllV) {
    for (int src = 0; src < size; ++src) {
      for (int dst = 0; dst < size; ++dst) {
        const std::int64_t sent = decode(gathered, size, src).counts[dst];
        const std::int64_t expected = decode(gathered, size, dst).recv[src];
        if (sent != expected) {
          return {src, "rank " + std::to_string(src) + " sends " + std::to_string(sent) + " elements to rank " +
                           std::to_string(dst) + ", which expects " + std::to_string(expected)};
        }
      }
    }
  }
  return {};
}

}  // namespace ntp::comm
