#pragma once
// Hashes of a rank's training state (parameters and both AdamW moments), per
// global unit, so that every holder of a unit can be compared with every
// other one without moving the values: the replicas of a job must hold
// bit-identical state (the DP invariant, DESIGN §4), and so must every slot's
// copy of the replicated tensors.
//
// A unit's hash covers, for every tensor of its kind in layout order, the
// unit's parameters, then its first moment, then its second moment. It does
// not depend on which other units the rank holds, so it is the same on any
// layout. The replicated hash covers every replicated tensor the same way.
#include <array>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/parameters.h"

namespace ntp::train {

// Index 0, 1, 2 of the per-kind arrays below.
constexpr std::array<model::UnitKind, 3> kShardedKinds = {model::UnitKind::kHead, model::UnitKind::kNeuron,
                                                          model::UnitKind::kVocab};
const char* kind_key(model::UnitKind kind);  // "heads", "neurons", "vocab"

struct StateHashes {
  // Per sharded kind: (global unit id, hash), ascending unit id.
  std::array<std::vector<std::pair<std::int64_t, std::uint64_t>>, 3> units;
  std::uint64_t replicated = 0;

  // One value per kind that does not depend on how the units are split among
  // ranks: the sum (mod 2^64) of mix(unit, hash). The digests of a replica's
  // ranks add up to the replica's digest, equal for every replica.
  std::array<std::uint64_t, 3> digests() const;

  // {"heads": [[unit, "hex"], ...], "neurons": ..., "vocab": ..., "replicated": "hex"}
  nlohmann::json to_json() const;
  static StateHashes from_json(const nlohmann::json& j);
};

// `m` and `v` are laid out like `params` (by `layout`); empty spans hash as
// parameters only.
StateHashes hash_state(const model::ParameterLayout& layout, std::span<const float> params,
                       std::span<const float> m, std::span<const float> v);

std::uint64_t mix_unit(std::int64_t unit, std::uint64_t hash);

}  // namespace ntp::train
