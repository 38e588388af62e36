#include "train/state_hash.h"

#include <stdexcept>

#include <fmt/format.h>
#include <xxhash.h>

namespace ntp::train {
namespace {

constexpr std::uint64_t kHashStart = 1469598103934665603ull;

// XXH3 over the bytes of the values (so -0.0 and 0.0 differ, as they would
// after any layout-dependent arithmetic), seeded with the hash so far: a
// chain, in which the order of the pieces counts. It runs at memory speed;
// the byte-wise FNV-1a it replaced took a fifth of a recovery's CPU time.
std::uint64_t chain(std::uint64_t h, const float* values, std::int64_t count) {
  return XXH3_64bits_withSeed(values, static_cast<std::size_t>(count) * sizeof(float), h);
}

std::size_t kind_index(model::UnitKind kind) {
  for (std::size_t k = 0; k < kShardedKinds.size(); ++k) {
    if (kShardedKinds[k] == kind) return k;
  }
  throw std::invalid_argument("state hash: replicated tensors have no unit index");
}

std::string hex(std::uint64_t h) { return fmt::format("{:016x}", h); }
std::uint64_t from_hex(const std::string& text) { return std::stoull(text, nullptr, 16); }

}  // namespace

const char* kind_key(model::UnitKind kind) {
  switch (kind) {
    case model::UnitKind::kHead:
      return "heads";
    case model::UnitKind::kNeuron:
      return "neurons";
    case model::UnitKind::kVocab:
      return "vocab";
    case model::UnitKind::kReplicated:
      break;
  }
  return "replicated";
}

std::uint64_t mix_unit(std::int64_t unit, std::uint64_t hash) {
  // splitmix64 of (unit, hash): digests add these, so a swap of two units'
  // values changes the sum.
  std::uint64_t z = hash ^ (static_cast<std::uint64_t>(unit) * 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

StateHashes hash_state(const model::ParameterLayout& layout, std::span<const float> params,
                       std::span<const float> m, std::span<const float> v) {
  StateHashes out;
  std::array<std::vector<std::uint64_t>, 3> running;  // per kind, by offset in the rank's unit list
  const model::Shard& shard = layout.shard();
  const layout::IntervalSet* sets[3] = {&shard.heads, &shard.neurons, &shard.vocab};
  for (std::size_t k = 0; k < 3; ++k) running[k].assign(static_cast<std::size_t>(sets[k]->size()), kHashStart);
  std::uint64_t replicated = kHashStart;
  const std::span<const float> states[3] = {params, m, v};
  for (const model::TensorSpec& spec : layout.tensors()) {
    for (const std::span<const float>& state : states) {
      if (state.empty()) continue;
      const float* base = state.data() + spec.offset;
      if (spec.kind == model::UnitKind::kReplicated) {
        replicated = chain(replicated, base, spec.count);
        continue;
      }
      std::vector<std::uint64_t>& h = running[kind_index(spec.kind)];
      for (std::size_t i = 0; i < h.size(); ++i) {
        h[i] = chain(h[i], base + static_cast<std::int64_t>(i) * spec.unit_size, spec.unit_size);
      }
    }
  }
  for (std::size_t k = 0; k < 3; ++k) {
    std::size_t i = 0;
    for (const layout::Interval& iv : sets[k]->intervals()) {
      for (layout::Unit u = iv.start; u < iv.end; ++u, ++i) out.units[k].push_back({u, running[k][i]});
    }
  }
  out.replicated = replicated;
  return out;
}

std::array<std::uint64_t, 3> StateHashes::digests() const {
  std::array<std::uint64_t, 3> d{};
  for (std::size_t k = 0; k < 3; ++k) {
    for (const auto& [unit, hash] : units[k]) d[k] += mix_unit(unit, hash);
  }
  return d;
}

nlohmann::json StateHashes::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (std::size_t k = 0; k < 3; ++k) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& [unit, hash] : units[k]) list.push_back({unit, hex(hash)});
    j[kind_key(kShardedKinds[k])] = std::move(list);
  }
  j["replicated"] = hex(replicated);
  return j;
}

StateHashes StateHashes::from_json(const nlohmann::json& j) {
  StateHashes out;
  for (std::size_t k = 0; k < 3; ++k) {
    for (const nlohmann::json& item : j.at(kind_key(kShardedKinds[k]))) {
      out.units[k].push_back({item.at(0).get<std::int64_t>(), from_hex(item.at(1).get<std::string>())});
    }
  }
  out.replicated = from_hex(j.at("replicated").get<std::string>());
  return out;
}

}  // namespace ntp::train
