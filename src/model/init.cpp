#include "model/init.h"

#include <cmath>
#include <string>

namespace ntp::model {

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Standard normals from a counter: Box-Muller on two hashed uniforms gives the
// pair of elements (2k, 2k + 1) at once (cosine and sine).
struct NormalPair {
  float even, odd;
};
NormalPair normals_at(std::uint64_t seed, std::uint64_t tensor, std::uint64_t pair) {
  const std::uint64_t h = splitmix64(seed ^ splitmix64(tensor * 0x100000001b3ULL ^ pair));
  const std::uint64_t h2 = splitmix64(h);
  const double u1 = (static_cast<double>(h >> 11) + 1.0) / 9007199254740993.0;  // (0, 1]
  const double u2 = static_cast<double>(h2 >> 11) / 9007199254740992.0;
  const double r = std::sqrt(-2.0 * std::log(u1));
  return {static_cast<float>(r * std::cos(2.0 * M_PI * u2)),
          static_cast<float>(r * std::sin(2.0 * M_PI * u2))};
}

bool ends_with(const std::string& s, const char* suffix) {
  const std::string t(suffix);
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

}  // namespace

void init_parameters(const ParameterLayout& layout, std::span<float> values, std::uint64_t seed) {
  const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(layout.config().layers));
  for (const TensorSpec& t : layout.tensors()) {
    float* out = values.data() + t.offset;
    if (!t.weight_decay) {  // biases and LayerNorms
      const float fill = ends_with(t.name, "ln1_w") || ends_with(t.name, "ln2_w") ||
                                 t.name == "lnf_w" ? 1.0f : 0.0f;
      for (std::int64_t i = 0; i < t.count; ++i) out[i] = fill;
      continue;
    }
    const float std_dev =
        ends_with(t.name, "proj_wt") || ends_with(t.name, "fc2_wt") ? residual_std : 0.02f;
    std::int64_t local = 0;
    for (const layout::Interval& iv : t.units.intervals()) {
      const std::int64_t first = iv.start * t.unit_size;  // index in the full tensor
      const std::int64_t count = iv.size() * t.unit_size;
      for (std::int64_t e = 0; e < count; ++e) {
        const auto full_index = static_cast<std::uint64_t>(first + e);
        const NormalPair z = normals_at(seed, t.whole_index, full_index / 2);
        out[local + e] = std_dev * ((full_index % 2 == 0) ? z.even : z.odd);
        if (full_index % 2 == 0 && e + 1 < count) {  // its partner is next: use the sine too
          out[local + e + 1] = std_dev * z.odd;
          ++e;
        }
      }
      local += count;
    }
  }
}

}  // namespace ntp::model
