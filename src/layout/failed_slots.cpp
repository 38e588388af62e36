#include "layout/failed_slots.h"

#include <algorithm>
#include <stdexcept>

#include "layout/spec_text.h"

namespace ntp::layout {

using spec_text::parse_id;
using spec_text::split;
using spec_text::trim;

FailedSlots parse_failed_slots(std::string_view spec) {
  FailedSlots failed;
  if (trim(spec).empty()) return failed;
  for (std::string_view entry : split(spec, ';')) {
    const size_t colon = entry.find(':');
    if (trim(entry).empty() || colon == std::string_view::npos)
      throw std::invalid_argument("malformed entry '" + std::string(entry) +
                                  "' (expected REPLICA:SLOT[,SLOT...])");
    const int replica = parse_id(entry.substr(0, colon), "replica", entry);
    if (failed.count(replica))
      throw std::invalid_argument("replica " + std::to_string(replica) + " listed twice");
    std::vector<int>& slots = failed[replica];
    for (std::string_view item : split(entry.substr(colon + 1), ',')) {
      const int slot = parse_id(item, "slot", entry);
      if (std::find(slots.begin(), slots.end(), slot) != slots.end())
        throw std::invalid_argument("duplicate slot " + std::to_string(slot) + " of replica " +
                                    std::to_string(replica));
      slots.push_back(slot);
    }
  }
  return failed;
}

std::string format_failed_slots(const FailedSlots& failed) {
  std::string out;
  for (const auto& [replica, slots] : failed) {
    if (slots.empty()) continue;
    std::vector<int> sorted = slots;
    std::sort(sorted.begin(), sorted.end());
    if (!out.empty()) out += ';';
    // Appends piece by piece: GCC 12 at -O3 reports a false -Wrestrict on
    // `"," + std::to_string(...)` temporaries.
    out += std::to_string(replica);
    out += ':';
    for (size_t i = 0; i < sorted.size(); ++i) {
      if (i) out += ',';
      out += std::to_string(sorted[i]);
    }
  }
  return out;
}

void validate_failed_slots(const FailedSlots& failed, int replicas, int tp) {
  for (const auto& [replica, slots] : failed) {
    if (replica < 0 || replica >= replicas)
      throw std::invalid_argument("failed replica " + std::to_string(replica) +
                                  " out of range [0, " + std::to_string(replicas) + ")");
    std::vector<int> sorted = slots;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i) {
      const std::string where =
          "slot " + std::to_string(sorted[i]) + " of replica " + std::to_string(replica);
      if (sorted[i] < 0 || sorted[i] >= tp)
        throw std::invalid_argument("failed " + where + " out of range [0, " + std::to_string(tp) +
                                    ")");
      if (i > 0 && sorted[i] == sorted[i - 1])
        throw std::invalid_argument("duplicate failed " + where);
    }
  }
}

}  // namespace ntp::layout
