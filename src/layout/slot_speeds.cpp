#include "layout/slot_speeds.h"

#include <charconv>
#include <cmath>
#include <stdexcept>

#include "layout/spec_text.h"

namespace ntp::layout {

namespace {

double parse_speed(std::string_view text, std::string_view entry) {
  text = spec_text::trim(text);
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    throw std::invalid_argument("bad speed '" + std::string(text) + "' in entry '" +
                                std::string(entry) + "' (expected a number)");
  return value;
}

}  // namespace

SlotSpeeds parse_slot_speeds(std::string_view spec) {
  SlotSpeeds speeds;
  if (spec_text::trim(spec).empty()) return speeds;
  for (std::string_view entry : spec_text::split(spec, ';')) {
    const size_t colon = entry.find(':');
    if (spec_text::trim(entry).empty() || colon == std::string_view::npos)
      throw std::invalid_argument("malformed entry '" + std::string(entry) +
                                  "' (expected REPLICA:SPEED,SPEED,... one speed per slot)");
    const int replica = spec_text::parse_id(entry.substr(0, colon), "replica", entry);
    if (speeds.count(replica))
      throw std::invalid_argument("replica " + std::to_string(replica) + " listed twice");
    std::vector<double>& slots = speeds[replica];
    for (std::string_view item : spec_text::split(entry.substr(colon + 1), ','))
      slots.push_back(parse_speed(item, entry));
  }
  return speeds;
}

std::string slot_speeds_text(const SlotSpeeds& speeds) {
  std::string text;
  for (const auto& [replica, slots] : speeds) {
    if (!text.empty()) text += ';';
    text += std::to_string(replica) + ':';
    for (size_t s = 0; s < slots.size(); ++s) {
      char buffer[32];
      const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, slots[s]);
      if (s > 0) text += ',';
      text.append(buffer, end);
    }
  }
  return text;
}

void validate_slot_speeds(const SlotSpeeds& speeds, int replicas, int tp) {
  for (const auto& [replica, slots] : speeds) {
    const std::string of = "replica " + std::to_string(replica);
    if (replica < 0 || replica >= replicas)
      throw std::invalid_argument("speeds of " + of + " out of range [0, " +
                                  std::to_string(replicas) + ")");
    if (static_cast<int>(slots.size()) != tp)
      throw std::invalid_argument(std::to_string(slots.size()) + " speeds for " + of +
                                  ", expected one per slot (" + std::to_string(tp) + ")");
    for (size_t s = 0; s < slots.size(); ++s)
      if (!std::isfinite(slots[s]) || slots[s] <= 0)
        throw std::invalid_argument("speed " + std::to_string(slots[s]) + " of slot " +
                                    std::to_string(s) + " of " + of + " must be finite and > 0");
  }
}

std::vector<double> speeds_of(const SlotSpeeds& speeds, int replica,
                              const std::vector<int>& slots) {
  const auto it = speeds.find(replica);
  std::vector<double> out;
  out.reserve(slots.size());
  for (int s : slots)
    out.push_back(it == speeds.end() ? 1.0 : it->second.at(static_cast<size_t>(s)));
  return out;
}

}  // namespace ntp::layout
