#pragma once
// Which slots of which replicas have failed, and its text form
// "R:S,S;R:S" ("0:2,5;3:7": replica 0 lost slots 2 and 5, replica 3 lost
// slot 7). The empty string means no failed slot.
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ntp::layout {

// replica -> its failed slots. Replicas not listed have no failure.
using FailedSlots = std::map<int, std::vector<int>>;

// Parses the text form. Spaces around numbers are allowed. Throws
// std::invalid_argument naming the offending item: a malformed entry or
// number, a negative id, a replica listed twice, a slot listed twice.
FailedSlots parse_failed_slots(std::string_view spec);

// The text form of `failed`, slots ascending: parse_failed_slots inverts it.
std::string format_failed_slots(const FailedSlots& failed);

// Checks ranges and duplicates against a job of `replicas` x `tp` slots;
// throws std::invalid_argument naming the replica and slot.
void validate_failed_slots(const FailedSlots& failed, int replicas, int tp);

}  // namespace ntp::layout
