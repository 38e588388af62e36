#include "train/state_move.h"

#include <algorithm>

#include <array>
#include <map>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>
#include <xxhash.h>

#include "model/reshard.h"
#include "tensor/buffer.h"

namespace ntp::train {
namespace {

constexpr std::array<model::UnitKind, 3> kKinds = {model::UnitKind::kHead, model::UnitKind::kNeuron,
                                                   model::UnitKind::kVocab};
constexpr std::array<model::StateKind, 3> kStates = {model::StateKind::kParams, model::StateKind::kAdamM,
                                                     model::StateKind::kAdamV};
constexpr std::uint32_t kTagsPerKind = 1u << 20;
constexpr std::uint32_t kChecksumTag = 1u << 30;

constexpr std::array<const char*, 3> kKindNames = {"heads", "FFN neurons", "vocabulary rows"};
// The replicated tensors' message: after every kind's moves.
constexpr std::uint32_t kReplicatedTag = static_cast<std::uint32_t>(kKinds.size()) * kTagsPerKind;

const layout::TransitionPlan& plan_of(const KindPlans& plans, std::size_t kind) {
  return kind == 0 ? plans.heads : kind == 1 ? plans.neurons : plans.vocab;
}

// A move's message: for every tensor of its kind (layout order), for the
// parameters and both moments, the values of the move's units, unit-major.
// `base` gives each tensor's first element in the message.
// `checksum` travels with it and is checked on arrival. The values are a
// Buffer, not a vector: every element is packed or received, and a Buffer of
// this size is zeroed by the kernel at first touch instead of by a memset.
struct Message {
  layout::IntervalSet units;
  std::map<std::string, std::int64_t> base;
  tensor::Buffer values;
  std::int64_t checksum = 0;
  std::string what;  // "heads [0,4) from replica 1 slot 0"
};

// XXH3 over the bytes of the values: it runs at memory speed, where a
// byte-wise hash took a fifth of the transfer's CPU time.
std::int64_t checksum_of(const tensor::Buffer& values) {
  return static_cast<std::int64_t>(XXH3_64bits(values.data(), values.size() * sizeof(float)));
}

Message empty_message(const model::ParameterLayout& layout, model::UnitKind kind,
                      const layout::IntervalSet& units) {
  Message msg;
  msg.units = units;
  std::int64_t size = 0;
  for (const model::TensorSpec& spec : layout.tensors()) {
    if (spec.kind != kind) continue;
    msg.base[spec.name] = size;
    size += static_cast<std::int64_t>(kStates.size()) * units.size() * spec.unit_size;
  }
  msg.values = tensor::Buffer(static_cast<std::size_t>(size));
  return msg;
}

void pack(Message& msg, const model::ParameterLayout& layout, model::UnitKind kind,
          const std::array<std::span<const float>, 3>& state) {
  for (const model::TensorSpec& spec : layout.tensors()) {
    if (spec.kind != kind) continue;
    float* dst = msg.values.data() + msg.base.at(spec.name);
    for (const std::span<const float>& values : state) {
      model::copy_units(spec, values, msg.units, dst);
      dst += msg.units.size() * spec.unit_size;
    }
  }
}

// Serves reshard's requests from the received messages: each message's
// share of `units` is copied run by run (a run of units is contiguous in the
// message and in `dst`, both unit-major in increasing unit id).
void fetch_from(const std::vector<Message>& received, model::StateKind state,
                const model::TensorSpec& spec, const layout::IntervalSet& units, float* dst) {
  const auto s = static_cast<std::int64_t>(state);
  layout::IntervalSet covered;
  for (const Message& msg : received) {
    const auto base = msg.base.find(spec.name);
    if (base == msg.base.end()) continue;
    const layout::IntervalSet pieces = units.intersect(msg.units);
    const float* values = msg.values.data() + base->second + s * msg.units.size() * spec.unit_size;
    for (const layout::Interval& piece : pieces.intervals()) {
      std::copy_n(values + msg.units.offset_of(piece.start) * spec.unit_size, piece.size() * spec.unit_size,
                  dst + units.offset_of(piece.start) * spec.unit_size);
    }
    covered.add(pieces);
  }
  const layout::IntervalSet missing = units.subtract(covered);
  if (!missing.empty()) {
    throw std::logic_error(fmt::format("state move: units {} of {} were neither kept nor received",
                                       missing.to_string(), spec.name));
  }
}

// The replicated tensors of a model stage, in layout order: the same on every
// rank of the stage. Their message holds the parameters, then both moments,
// tensor after tensor.
struct ReplicatedTensors {
  std::vector<const model::TensorSpec*> specs;
  std::size_t elements = 0;  // of one state

  explicit ReplicatedTensors(const model::ParameterLayout& layout) {
    for (const model::TensorSpec& spec : layout.tensors()) {
      if (spec.kind != model::UnitKind::kReplicated) continue;
      specs.push_back(&spec);
      elements += static_cast<std::size_t>(spec.count);
    }
  }
  std::size_t message_size() const { return kStates.size() * elements; }
  void pack(const std::array<std::span<const float>, 3>& state, float* dst) const {
    for (const std::span<const float>& values : state) {
      for (const model::TensorSpec* spec : specs) dst = std::copy_n(values.begin() + spec->offset, spec->count, dst);
    }
  }
  void unpack(const float* src, const std::array<std::span<float>, 3>& state) const {
    for (const std::span<float>& values : state) {
      for (const model::TensorSpec* spec : specs) {
        std::copy_n(src, spec->count, values.begin() + spec->offset);
        src += spec->count;
      }
    }
  }
};

}  // namespace

std::vector<std::pair<int, int>> move_links(const KindPlans& plans,
                                            const std::function<int(layout::SlotRef)>& group_rank_of) {
  std::vector<std::pair<int, int>> links;
  for (std::size_t k = 0; k < kKinds.size(); ++k) {
    for (const layout::Move& move : plan_of(plans, k).moves) {
      links.emplace_back(group_rank_of(move.from), group_rank_of(move.to));
    }
  }
  std::sort(links.begin(), links.end());
  links.erase(std::unique(links.begin(), links.end()), links.end());
  return links;
}

StateMoveStats move_state(model::Model& model, model::AdamW& optimizer, const model::Shard& next,
                          const KindPlans& plans, const StateMoveRank& rank, comm::Group& group) {
  const model::ParameterLayout& layout = model.layout();
  const std::array<std::span<const float>, 3> state = {std::as_const(model).params(), optimizer.m().span(),
                                                       optimizer.v().span()};
  std::vector<Message> sent;
  std::vector<Message> received;
  std::vector<comm::P2POp> ops;
  StateMoveStats stats;
  // Reserve first: P2POps point into the messages.
  std::size_t n_sent = 0;
  std::size_t n_received = 0;
  for (std::size_t k = 0; k < kKinds.size(); ++k) {
    for (const layout::Move& move : plan_of(plans, k).moves) {
      n_sent += rank.from && move.from == *rank.from;
      n_received += rank.to && move.to == *rank.to;
    }
  }
  sent.reserve(n_sent);
  received.reserve(n_received + 1);  // and the replicated tensors
  for (std::size_t k = 0; k < kKinds.size(); ++k) {
    const std::vector<layout::Move>& moves = plan_of(plans, k).moves;
    for (std::size_t i = 0; i < moves.size(); ++i) {
      const layout::Move& move = moves[i];
      const auto tag = static_cast<std::uint32_t>(k * kTagsPerKind + i);
      if (rank.from && move.from == *rank.from) {
        sent.push_back(empty_message(layout, kKinds[k], move.units));
        Message& msg = sent.back();
        pack(msg, layout, kKinds[k], state);
        msg.checksum = checksum_of(msg.values);
        const int dst = rank.group_rank_of(move.to);
        ops.push_back(comm::P2POp::send(comm::ConstView(msg.values.data(), msg.values.size()), dst, tag));
        ops.push_back(comm::P2POp::send(comm::ConstView(&msg.checksum, 1), dst, tag | kChecksumTag));
        stats.units_out += move.units.size();
        stats.bytes_out += static_cast<std::int64_t>(sent.back().values.size() * sizeof(float));
      }
      if (rank.to && move.to == *rank.to) {
        received.push_back(empty_message(layout, kKinds[k], move.units));
        Message& msg = received.back();
        msg.what = fmt::format("{} {} from replica {} slot {}", kKindNames[k], move.units.to_string(),
                               move.from.replica, move.from.slot);
        const int src = rank.group_rank_of(move.from);
        ops.push_back(comm::P2POp::recv(msg.values.span(), src, tag));
        ops.push_back(comm::P2POp::recv(comm::View(&msg.checksum, 1), src, tag | kChecksumTag));
        stats.units_in += move.units.size();
        stats.bytes_in += static_cast<std::int64_t>(received.back().values.size() * sizeof(float));
      }
    }
  }
  const ReplicatedTensors replicated(layout);
  Message replicated_out;
  if (!rank.replicated_to.empty()) {
    replicated_out.values = tensor::Buffer(replicated.message_size());
    replicated.pack(state, replicated_out.values.data());
    replicated_out.checksum = checksum_of(replicated_out.values);
    for (int dst : rank.replicated_to) {
      ops.push_back(comm::P2POp::send(comm::ConstView(replicated_out.values.data(), replicated_out.values.size()), dst,
                                      kReplicatedTag));
      ops.push_back(comm::P2POp::send(comm::ConstView(&replicated_out.checksum, 1), dst, kReplicatedTag | kChecksumTag));
      stats.bytes_out += static_cast<std::int64_t>(replicated_out.values.size() * sizeof(float));
    }
  }
  if (rank.replicated_from) {
    received.push_back({});
    Message& msg = received.back();
    msg.values = tensor::Buffer(replicated.message_size());
    msg.what = fmt::format("the replicated tensors from exchange rank {}", *rank.replicated_from);
    ops.push_back(comm::P2POp::recv(msg.values.span(), *rank.replicated_from, kReplicatedTag));
    ops.push_back(comm::P2POp::recv(comm::View(&msg.checksum, 1), *rank.replicated_from, kReplicatedTag | kChecksumTag));
    stats.bytes_in += static_cast<std::int64_t>(msg.values.size() * sizeof(float));
  }
  group.exchange(ops);
  for (const Message& msg : received) {
    if (checksum_of(msg.values) != msg.checksum) {
      throw std::runtime_error("state move: the state of " + msg.what + " arrived corrupted (checksum)");
    }
  }
  if (rank.replicated_from) {
    replicated.unpack(received.back().values.data(), {model.params(), optimizer.m().span(), optimizer.v().span()});
    received.pop_back();  // fetch_from reads the moves' messages only
  }
  if (!rank.to) return stats;
  model::reshard(model, &optimizer, next, [&received](model::StateKind s, const model::TensorSpec& spec,
                                                      const layout::IntervalSet& units, float* dst) {
    fetch_from(received, s, spec, units, dst);
  }, !rank.stale);
  return stats;
}

}  // namespace ntp::train
