#pragma once
// The sync partition S(U, K): units [0, U) cut into K contiguous intervals
// whose sizes differ by at most one (the first U % K intervals hold one more).
// Core slot j of every training replica holds exactly S_j during the DP
// all-reduce of group j.
#include <vector>

#include "layout/interval_set.h"

namespace ntp::layout {

// Number of units of part `index` when `units` are split into `parts` nearly
// equal parts, the larger parts first: floor(U/parts) + (index < U % parts).
Unit balanced_share(Unit units, int parts, int index);

// S_j of S(units, degree). Requires 1 <= degree, 0 <= j < degree.
Interval sync_interval(Unit units, int degree, int j);

// All K intervals of S(units, degree), in order.
std::vector<IntervalSet> sync_partition(Unit units, int degree);

}  // namespace ntp::layout
