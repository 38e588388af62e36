#include "train/faults.h"

#include <signal.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

namespace ntp::train {
namespace {

std::string trim(const std::string& text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  const auto last = text.find_last_not_of(" \t");
  return text.substr(first, last - first + 1);
}

std::int64_t parse_int(const std::string& text, const std::string& entry, const char* what) {
  std::size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty() || value < 0) {
    throw std::invalid_argument(fmt::format("'{}': {} '{}' is not a number >= 0", entry, what, text));
  }
  return value;
}

double parse_slowdown(const std::string& text, const std::string& entry) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty() || !std::isfinite(value) || value < 1.0) {
    throw std::invalid_argument(fmt::format("'{}': SLOW={} is not a factor >= 1", entry, text));
  }
  return value;
}

FaultSpec parse_one(const std::string& entry) {
  const std::size_t at = entry.find('@');
  if (at == std::string::npos) {
    throw std::invalid_argument(fmt::format("'{}': expected RANK@STEP:PHASE[:SIGNAL]", entry));
  }
  std::vector<std::string> parts;
  std::stringstream rest(entry.substr(at + 1));
  for (std::string part; std::getline(rest, part, ':');) parts.push_back(trim(part));
  if (parts.size() < 2 || parts.size() > 3) {
    throw std::invalid_argument(fmt::format("'{}': expected RANK@STEP:PHASE[:SIGNAL]", entry));
  }
  FaultSpec f;
  f.rank = static_cast<int>(parse_int(trim(entry.substr(0, at)), entry, "rank"));
  f.step = parse_int(parts[0], entry, "step");
  f.phase = parts[1];
  if (std::find(kFaultPhases.begin(), kFaultPhases.end(), f.phase) == kFaultPhases.end()) {
    throw std::invalid_argument(fmt::format("'{}': unknown phase '{}' (start, forward, backward, sync, "
                                            "commit, optimizer, recovery, validation, checkpoint)",
                                            entry, f.phase));
  }
  if (parts.size() == 3) {
    if (parts[2] == "KILL") {
      f.signal = SIGKILL;
    } else if (parts[2] == "STOP") {
      f.signal = SIGSTOP;
    } else if (parts[2] == "SEGV") {
      f.signal = SIGSEGV;
    } else if (parts[2] == "HANG") {
      f.signal = kHang;
    } else if (parts[2] == "MUTE") {
      f.signal = kMute;
    } else if (parts[2] == "LAPSE") {
      f.signal = kLapse;
    } else if (parts[2] == "LAG" && f.phase == "commit") {
      f.signal = kLag;
    } else if (parts[2].starts_with("SLOW=")) {
      f.signal = kSlow;
      f.slowdown = parse_slowdown(parts[2].substr(5), entry);
    } else {
      throw std::invalid_argument(fmt::format(
          "'{}': signal '{}' is not KILL, STOP, SEGV, HANG, MUTE, LAPSE or SLOW=F (or LAG, at commit)", entry, parts[2]));
    }
  }
  return f;
}

}  // namespace

// The last two, which random faults never pick (a step may have neither):
// "validation", at the start of the validation pass after the step's update
// (train.eval_every), and "checkpoint", in the save made after the step,
// before this rank's part is written.
const std::vector<std::string> kFaultPhases = {"start",     "forward",   "backward",   "sync",      "commit",
                                               "optimizer", "recovery",  "validation", "checkpoint"};

std::vector<FaultSpec> parse_faults(const std::string& text) {
  std::vector<FaultSpec> out;
  std::stringstream in(text);
  for (std::string entry; std::getline(in, entry, ';');) {
    entry = trim(entry);
    if (!entry.empty()) out.push_back(parse_one(entry));
  }
  return out;
}

std::vector<FaultSpec> chaos_faults(std::int64_t count, std::uint64_t seed, int ranks, std::int64_t steps) {
  std::mt19937_64 rng(seed);
  std::vector<int> order(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) order[static_cast<std::size_t>(r)] = r;
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<FaultSpec> out;
  for (std::int64_t i = 0; i < count && i < ranks && steps > 1; ++i) {
    FaultSpec f;
    f.rank = order[static_cast<std::size_t>(i)];
    f.step = 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(steps - 1));
    f.phase = kFaultPhases[rng() % (kFaultPhases.size() - 2)];
    f.signal = rng() % 2 == 0 ? SIGKILL : SIGSTOP;
    out.push_back(f);
  }
  return out;
}

std::string to_string(const FaultSpec& f) {
  if (f.signal == kSlow) return fmt::format("{}@{}:{}:SLOW={}", f.rank, f.step, f.phase, f.slowdown);
  return fmt::format("{}@{}:{}:{}", f.rank, f.step, f.phase,
                     f.signal == SIGSTOP ? "STOP"
                     : f.signal == SIGSEGV ? "SEGV"
                     : f.signal == kLag ? "LAG"
                     : f.signal == kHang ? "HANG"
                     : f.signal == kMute ? "MUTE"
                     : f.signal == kLapse ? "LAPSE"
                                         : "KILL");
}

}  // namespace ntp::train
