#include "layout/shares.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

#include "layout/errors.h"

namespace ntp::layout {

namespace {

// `blocks` blocks over slots of `speeds`, each slot at least `least` blocks,
// by earliest finish: the greedy that hands out blocks one at a time to the
// slot with the smallest (c + 1) / speed. It starts from a lower bound of
// that greedy's result (every value c / speed <= t is among the blocks it
// hands out, for t = (blocks - least * k) / sum(speeds)), so it tops up at
// most 2k blocks one by one instead of all of them.
std::vector<Unit> earliest_finish(Unit blocks, Unit least, const std::vector<double>& speeds) {
  const double total = std::accumulate(speeds.begin(), speeds.end(), 0.0);
  const auto k = static_cast<Unit>(speeds.size());
  const double t = static_cast<double>(blocks - least * k) / total;
  std::vector<Unit> c(speeds.size());
  for (size_t i = 0; i < c.size(); ++i)
    c[i] = std::max(least, static_cast<Unit>(std::floor(t * speeds[i])));
  Unit given = std::accumulate(c.begin(), c.end(), Unit{0});
  if (given > blocks) {  // rounding took a floor too high: start from the minimum
    std::fill(c.begin(), c.end(), least);
    given = least * k;
  }
  for (; given < blocks; ++given) {
    size_t best = 0;
    for (size_t i = 1; i < c.size(); ++i)
      if ((static_cast<double>(c[i]) + 1) / speeds[i] <
          (static_cast<double>(c[best]) + 1) / speeds[best])
        best = i;
    ++c[best];
  }
  return c;
}

// Adds `rest` units to the slot that then finishes first, ties to the highest
// index (with equal speeds the last slot, which holds the fewest blocks).
void place_remainder(Unit rest, const std::vector<double>& speeds, std::vector<Unit>& shares) {
  if (rest == 0) return;
  size_t best = shares.size() - 1;
  for (size_t i = shares.size() - 1; i-- > 0;)
    if (static_cast<double>(shares[i] + rest) / speeds[i] <
        static_cast<double>(shares[best] + rest) / speeds[best])
      best = i;
  shares[best] += rest;
}

}  // namespace

Unit balanced_share(Unit units, int parts, int index) {
  if (parts < 1) throw std::invalid_argument("parts must be >= 1, got " + std::to_string(parts));
  return units / parts + (index < units % parts ? 1 : 0);
}

Unit aligned_share(Unit units, int parts, int index, Unit block) {
  require_positive(block, "block");
  const Unit share = block * balanced_share(units / block, parts, index);
  return index == parts - 1 ? share + units % block : share;
}

Unit kind_block(Unit units, int tp, Unit align) {
  require_positive(align, "align");
  if (tp < 1) throw std::invalid_argument("tp must be >= 1, got " + std::to_string(tp));
  Unit block = align;
  while (block > 1 && units / block < kMinBlocksPerSlot * tp) block /= 2;
  return block;
}

SlotShares slot_shares(Unit units, Unit block, const std::vector<double>& speeds) {
  require_positive(block, "block");
  const auto k = static_cast<Unit>(speeds.size());
  if (k < 1) throw std::invalid_argument("slot_shares: no slot");
  if (units < k)
    throw std::invalid_argument("units (" + std::to_string(units) + ") smaller than the " +
                                std::to_string(k) + " active slots");
  for (double s : speeds)
    if (!std::isfinite(s) || s <= 0)
      throw std::invalid_argument("slot speed " + std::to_string(s) + " must be finite and > 0");
  for (SlotShares out{block, {}};; out.block /= 2) {
    const Unit blocks = units / out.block;
    // At block 1 every slot gets a unit whatever its speed: it must hold one.
    const Unit least = out.block == 1 ? 1 : 0;
    if (blocks < k && out.block > 1) continue;
    out.units = earliest_finish(blocks, least, speeds);
    if (out.block > 1 && std::find(out.units.begin(), out.units.end(), 0) != out.units.end())
      continue;
    for (Unit& u : out.units) u *= out.block;
    place_remainder(units - blocks * out.block, speeds, out.units);
    return out;
  }
}

}  // namespace ntp::layout
