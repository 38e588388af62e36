#include "layout/sync_partition.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace ntp::layout {

Unit balanced_share(Unit units, int parts, int index) {
  if (parts < 1) throw std::invalid_argument("parts must be >= 1, got " + std::to_string(parts));
  return units / parts + (index < units % parts ? 1 : 0);
}

Interval sync_interval(Unit units, int degree, int j) {
  if (degree < 1) throw std::invalid_argument("sync degree must be >= 1");
  if (j < 0 || j >= degree)
    throw std::out_of_range("sync interval " + std::to_string(j) + " out of range [0, " +
                            std::to_string(degree) + ")");
  const Unit base = units / degree;
  const Unit larger = units % degree;  // the first `larger` parts hold base + 1
  const Unit start = j * base + std::min<Unit>(j, larger);
  return {start, start + balanced_share(units, degree, j)};
}

std::vector<IntervalSet> sync_partition(Unit units, int degree) {
  std::vector<IntervalSet> parts;
  parts.reserve(static_cast<size_t>(degree));
  for (int j = 0; j < degree; ++j) {
    const Interval iv = sync_interval(units, degree, j);
    parts.push_back(IntervalSet::range(iv.start, iv.end));
  }
  return parts;
}

}  // namespace ntp::layout
