#include "model/reshard.h"

#include <algorithm>
#include <stdexcept>

namespace ntp::model {

void copy_units(const TensorSpec& spec, std::span<const float> values,
                const layout::IntervalSet& units, float* dst) {
  if (!units.subtract(spec.units).empty())
    throw std::invalid_argument("copy_units: " + spec.name + " does not hold units " +
                                units.subtract(spec.units).to_string());
  for (const layout::Interval& iv : units.intervals()) {
    const std::int64_t src = spec.offset + spec.units.offset_of(iv.start) * spec.unit_size;
    const std::int64_t n = iv.size() * spec.unit_size;
    std::copy_n(values.begin() + src, n, dst);
    dst += n;
  }
}

namespace {

tensor::Buffer reshard_state(StateKind state, const ParameterLayout& from,
                             std::span<const float> old_values, const ParameterLayout& to,
                             const UnitFetch& fetch, bool keep_local) {
  tensor::Buffer out(static_cast<std::size_t>(to.size()));
  for (std::size_t i = 0; i < to.tensors().size(); ++i) {
    const TensorSpec& old_spec = from.tensors()[i];
    const TensorSpec& new_spec = to.tensors()[i];
    float* dst = out.data() + new_spec.offset;
    // Walk the new units in storage order, run by run of "kept" or "fetched".
    const layout::IntervalSet kept = keep_local || new_spec.kind == UnitKind::kReplicated
                                         ? new_spec.units.intersect(old_spec.units)
                                         : layout::IntervalSet{};
    for (const layout::Interval& iv : new_spec.units.intervals()) {
      const layout::IntervalSet run = layout::IntervalSet::range(iv.start, iv.end);
      const layout::IntervalSet local = run.intersect(kept);
      const layout::IntervalSet remote = run.subtract(kept);
      // Pieces of the run in increasing unit order, each from its source.
      std::vector<std::pair<layout::Interval, bool>> pieces;
      for (const auto& p : local.intervals()) pieces.push_back({p, true});
      for (const auto& p : remote.intervals()) pieces.push_back({p, false});
      std::sort(pieces.begin(), pieces.end(),
                [](const auto& a, const auto& b) { return a.first.start < b.first.start; });
      for (const auto& [piece, is_local] : pieces) {
        const layout::IntervalSet units = layout::IntervalSet::range(piece.start, piece.end);
        if (is_local) copy_units(old_spec, old_values, units, dst);
        else fetch(state, new_spec, units, dst);
        dst += piece.size() * new_spec.unit_size;
      }
    }
  }
  return out;
}

}  // namespace

void reshard(Model& model, AdamW* optimizer, const Shard& next, const UnitFetch& fetch,
             bool keep_local) {
  const ParameterLayout from = model.layout();
  const ParameterLayout to(from.config(), next, from.stage());  // the same blocks, another shard
  if (model.tp_group() == nullptr && !(next == Shard::full(from.config())))
    throw std::invalid_argument("reshard: a partial shard needs a TP group");
  if (optimizer != nullptr) {
    tensor::Buffer m = reshard_state(StateKind::kAdamM, from, optimizer->m().span(), to, fetch, keep_local);
    tensor::Buffer v = reshard_state(StateKind::kAdamV, from, optimizer->v().span(), to, fetch, keep_local);
    optimizer->adopt(std::move(m), std::move(v));
  }
  model.adopt(next, reshard_state(StateKind::kParams, from, model.params(), to, fetch, keep_local));
}

}  // namespace ntp::model
