#pragma once
// Splitting the text forms of failed slots and slot speeds ("R:a,b;R:c"):
// shared by failed_slots.cpp and slot_speeds.cpp.
#include <charconv>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ntp::layout::spec_text {

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

inline std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  for (size_t pos = 0;;) {
    const size_t next = s.find(sep, pos);
    parts.push_back(s.substr(pos, next == std::string_view::npos ? next : next - pos));
    if (next == std::string_view::npos) return parts;
    pos = next + 1;
  }
}

// A replica or slot id: a non-negative integer; else std::invalid_argument
// naming `what` and the entry it is in.
inline int parse_id(std::string_view text, const char* what, std::string_view entry) {
  text = trim(text);
  int value = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < 0)
    throw std::invalid_argument(std::string("bad ") + what + " '" + std::string(text) +
                                "' in entry '" + std::string(entry) +
                                "' (expected a non-negative integer)");
  return value;
}

}  // namespace ntp::layout::spec_text
