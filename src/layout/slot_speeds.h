#pragma once
// The speed of each slot of a replica, relative to a healthy GPU (1.0), and
// its text form "R:s,s,s,s;R:..." ("0:1,1,0.5,1": replica 0's slot 2 runs
// at half speed). Shares follow speeds (shares.h): a slot at half speed
// holds half the units. A replica not listed runs every slot at 1.0.
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ntp::layout {

// replica -> the speed of each of its tp slots (failed slots' are ignored).
using SlotSpeeds = std::map<int, std::vector<double>>;

// Parses the text form. Throws std::invalid_argument naming the item: a
// malformed entry, a bad number, a replica listed twice.
SlotSpeeds parse_slot_speeds(std::string_view spec);

// The text form parse_slot_speeds reads back (each speed in its shortest
// exact decimal form), "" for none.
std::string slot_speeds_text(const SlotSpeeds& speeds);

// Checks against a job of `replicas` x `tp` slots: a listed replica in range,
// tp speeds each, every speed finite and > 0. Throws std::invalid_argument
// naming the replica and slot.
void validate_slot_speeds(const SlotSpeeds& speeds, int replicas, int tp);

// The speeds of `slots` of `replica` (1.0 each when the replica is not listed).
std::vector<double> speeds_of(const SlotSpeeds& speeds, int replica, const std::vector<int>& slots);

}  // namespace ntp::layout
