#include "layout/sync_partition.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "layout/errors.h"

namespace ntp::layout {

Interval sync_interval(Unit units, int degree, int j, Unit block) {
  if (degree < 1) throw std::invalid_argument("sync degree must be >= 1");
  require_positive(block, "block");
  if (j < 0 || j >= degree)
    throw std::out_of_range("sync interval " + std::to_string(j) + " out of range [0, " +
                            std::to_string(degree) + ")");
  // In blocks: the first `larger` parts hold base + 1 blocks.
  const Unit blocks = units / block;
  const Unit base = blocks / degree;
  const Unit larger = blocks % degree;
  const Unit start = block * (j * base + std::min<Unit>(j, larger));
  return {start, start + aligned_share(units, degree, j, block)};
}

std::vector<IntervalSet> sync_partition(Unit units, int degree, Unit block) {
  std::vector<IntervalSet> parts;
  parts.reserve(static_cast<size_t>(degree));
  for (int j = 0; j < degree; ++j) {
    const Interval iv = sync_interval(units, degree, j, block);
    parts.push_back(IntervalSet::range(iv.start, iv.end));
  }
  return parts;
}

}  // namespace ntp::layout
