#pragma once
// Moving a rank to a new unit assignment (after a failure or a repair). Units
// the rank keeps are copied locally; every other unit of the new shard is
// asked from `fetch`, which the trainer implements with the transition plan
// (from a surviving slot or a peer replica). Replicated tensors are kept.
#include <functional>

#include "layout/interval_set.h"
#include "model/model.h"
#include "model/optimizer.h"

namespace ntp::model {

enum class StateKind { kParams, kAdamM, kAdamV };

// Writes the values of `units` of tensor `spec` (unit-major, increasing unit
// id, units.size() * spec.unit_size floats) of the given state into `dst`.
using UnitFetch = std::function<void(StateKind state, const TensorSpec& spec,
                                     const layout::IntervalSet& units, float* dst)>;

// Reshards the parameters and, when `optimizer` is given, its moments.
// Without `keep_local`, every unit of `next` is fetched, even one the model
// holds (its own copy is outdated: a rank rolled forward after recovery).
void reshard(Model& model, AdamW* optimizer, const Shard& next, const UnitFetch& fetch,
             bool keep_local = true);

// Copies the values of `units` (a subset of spec.units) out of a buffer laid
// out by `layout`: the building block of a UnitFetch served from local memory.
void copy_units(const TensorSpec& spec, std::span<const float> values,
                const layout::IntervalSet& units, float* dst);

}  // namespace ntp::model
