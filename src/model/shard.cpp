#include "model/shard.h"

#include <stdexcept>
#include <string>

namespace ntp::model {

namespace {
void check_range(const layout::IntervalSet& set, layout::Unit units, const char* field) {
  if (set.empty()) return;
  const auto& ivs = set.intervals();
  if (ivs.front().start < 0 || ivs.back().end > units)
    throw std::invalid_argument(std::string("shard: ") + field + " " + set.to_string() +
                                " outside [0," + std::to_string(units) + ")");
}
}  // namespace

Shard Shard::full(const GptConfig& c) {
  return {layout::IntervalSet::range(0, c.head_units()), layout::IntervalSet::range(0, c.ffn()),
          layout::IntervalSet::range(0, c.padded_vocab)};
}

const layout::IntervalSet& Shard::of(UnitKind kind) const {
  switch (kind) {
    case UnitKind::kHead:
      return heads;
    case UnitKind::kNeuron:
      return neurons;
    case UnitKind::kVocab:
      return vocab;
    case UnitKind::kReplicated:
      break;
  }
  throw std::invalid_argument("shard: replicated tensors have no unit set");
}

void Shard::validate(const GptConfig& c) const {
  check_range(heads, c.head_units(), "heads");
  check_range(neurons, c.ffn(), "neurons");
  check_range(vocab, c.padded_vocab, "vocab");
}

}  // namespace ntp::model
