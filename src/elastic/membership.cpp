#include "elastic/membership.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace ntp::elastic {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPoll = std::chrono::milliseconds(20);

std::string epoch_key(std::uint64_t epoch, const std::string& leaf) {
  return fmt::format("ntp/e{}/{}", epoch, leaf);
}

// A survivor's state as text, separated by `sep`; the norm as its bits, so
// every rank gets exactly the value the commit decided.
std::string format_state(const Survivor& s, char sep) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, &s.grad_norm, sizeof bits);
  return fmt::format("{}{}{}{}{}{}{:x}{}{}", s.applied, sep, s.held_epoch, sep, s.pending, sep, bits, sep,
                     s.skipped ? 1 : 0);
}

void parse_state(std::stringstream& in, Survivor& s) {
  std::uint64_t bits = 0;
  int skipped = 0;
  char sep = 0;
  in >> s.applied >> std::noskipws >> sep >> std::skipws >> s.held_epoch >> std::noskipws >> sep >> std::skipws >>
      s.pending >> std::noskipws >> sep >> std::skipws >> std::hex >> bits >> std::dec >> std::noskipws >> sep >>
      std::skipws >> skipped;
  std::memcpy(&s.grad_norm, &bits, sizeof bits);
  s.skipped = skipped != 0;
}

std::vector<Survivor> parse_survivors(const std::string& text) {
  std::vector<Survivor> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    Survivor s;
    char colon = 0;
    std::stringstream fields(item);
    fields >> s.rank >> colon;
    parse_state(fields, s);
    out.push_back(s);
  }
  return out;
}

std::string format_survivors(const std::vector<Survivor>& survivors) {
  std::string text;
  for (const Survivor& s : survivors) {
    text += fmt::format("{}{}:{}", text.empty() ? "" : ",", s.rank, format_state(s, ':'));
  }
  return text;
}

struct Census {
  std::vector<Survivor> registered;  // ascending rank, not dead
  std::vector<int> silent;           // neither registered nor dead
};

std::optional<Survivor> registration(comm::Store& store, const MembershipOptions& o, int rank) {
  const auto value = store.try_get(epoch_key(o.epoch, fmt::format("alive/{}", rank)));
  if (!value) return std::nullopt;
  Survivor s;
  s.rank = rank;
  std::stringstream in(comm::to_text(*value));
  parse_state(in, s);
  return s;
}

Census take_census(comm::Store& store, const MembershipOptions& o) {
  Census c;
  for (int m : o.members) {
    if (store.try_get(dead_key(m))) continue;
    if (const auto s = registration(store, o, m)) {
      c.registered.push_back(*s);
    } else {
      c.silent.push_back(m);
    }
  }
  for (int m : o.candidates) {
    if (store.try_get(dead_key(m))) continue;
    if (const auto s = registration(store, o, m)) c.registered.push_back(*s);
  }
  std::sort(c.registered.begin(), c.registered.end(),
            [](const Survivor& a, const Survivor& b) { return a.rank < b.rank; });
  return c;
}

Membership result(const MembershipOptions& o, std::vector<Survivor> survivors) {
  Membership m{o.epoch, std::move(survivors), {}, {}};
  const std::vector<int> ranks = m.ranks();
  for (int r : o.members) {
    if (!std::binary_search(ranks.begin(), ranks.end(), r)) m.lost.push_back(r);
  }
  for (int r : o.candidates) {
    if (std::binary_search(ranks.begin(), ranks.end(), r)) m.joined.push_back(r);
  }
  return m;
}

}  // namespace

std::string dead_key(int rank) { return fmt::format("ntp/dead/{}", rank); }
std::string fence_key(int rank) { return fmt::format("ntp/fence/{}", rank); }

std::vector<int> Membership::ranks() const {
  std::vector<int> out;
  for (const Survivor& s : survivors) out.push_back(s.rank);
  return out;
}

Membership agree_membership(comm::Store& store, const MembershipOptions& o) {
  const std::string members_key = epoch_key(o.epoch, "members");
  Survivor me;
  me.applied = o.applied;
  me.held_epoch = o.held_epoch;
  me.pending = o.pending;
  me.grad_norm = o.grad_norm;
  me.skipped = o.skipped;
  store.set(epoch_key(o.epoch, fmt::format("alive/{}", o.rank)), comm::to_bytes(format_state(me, ' ')));
  const auto start = Clock::now();
  bool settled = false;
  while (Clock::now() - start < o.deadline) {
    if (const auto published = store.try_get(members_key)) {
      std::vector<Survivor> survivors = parse_survivors(comm::to_text(*published));
      Membership m = result(o, std::move(survivors));
      const std::vector<int> ranks = m.ranks();
      if (!std::binary_search(ranks.begin(), ranks.end(), o.rank)) {
        throw LeftOutError(fmt::format("rank {}: left out of epoch {} (survivors {}): it was declared lost",
                                       o.rank, o.epoch, fmt::join(ranks, ",")));
      }
      return m;
    }
    Census census = take_census(store, o);
    const bool waited_out = Clock::now() - start >= o.wait_for_blocked;
    if (census.silent.empty() || waited_out) {
      if (!settled) {
        std::this_thread::sleep_for(o.settle);  // let near-simultaneous deaths arrive
        settled = true;
        continue;
      }
      // Members still silent are fenced before anyone goes on without them.
      for (int m : census.silent) store.set(fence_key(m), comm::to_bytes("silent in the agreement"));
      store.create(members_key, comm::to_bytes(format_survivors(census.registered)));
      continue;  // read back whichever publication won
    }
    std::this_thread::sleep_for(kPoll);
  }
  throw std::runtime_error(fmt::format("rank {}: no membership for epoch {} within {} ms (deadline.rendezvous_s)",
                                       o.rank, o.epoch, o.deadline.count()));
}

}  // namespace ntp::elastic
