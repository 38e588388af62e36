#include "train/membership.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace ntp::train {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPoll = std::chrono::milliseconds(20);

std::string epoch_key(std::uint64_t epoch, const std::string& leaf) {
  return fmt::format("ntp/e{}/{}", epoch, leaf);
}

std::vector<int> parse_ranks(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stoi(item));
  return out;
}

// Members of the old epoch that registered and are not marked dead; sets
// `settled` when every member is accounted for either way.
std::vector<int> registered(comm::Store& store, const MembershipOptions& o, bool& settled) {
  std::vector<int> alive;
  settled = true;
  for (int m : o.members) {
    if (store.try_get(dead_key(m))) continue;
    if (store.try_get(epoch_key(o.epoch, fmt::format("alive/{}", m)))) {
      alive.push_back(m);
    } else {
      settled = false;
    }
  }
  return alive;
}

Membership result(const MembershipOptions& o, std::vector<int> survivors) {
  Membership m{o.epoch, std::move(survivors), {}};
  for (int r : o.members) {
    if (!std::binary_search(m.survivors.begin(), m.survivors.end(), r)) m.lost.push_back(r);
  }
  return m;
}

}  // namespace

std::string dead_key(int rank) { return fmt::format("ntp/dead/{}", rank); }

Membership agree_membership(comm::Store& store, const MembershipOptions& o) {
  const std::string members_key = epoch_key(o.epoch, "members");
  store.set(epoch_key(o.epoch, fmt::format("alive/{}", o.rank)), comm::to_bytes("1"));
  const auto start = Clock::now();
  while (Clock::now() - start < o.deadline) {
    if (const auto published = store.try_get(members_key)) {
      std::vector<int> survivors = parse_ranks(comm::to_text(*published));
      if (!std::binary_search(survivors.begin(), survivors.end(), o.rank)) {
        throw std::runtime_error(fmt::format(
            "rank {}: left out of epoch {} (survivors {}): it registered too late", o.rank, o.epoch,
            fmt::join(survivors, ",")));
      }
      return result(o, std::move(survivors));
    }
    bool settled = false;
    std::vector<int> alive = registered(store, o, settled);
    const bool silent_too_long = Clock::now() - start >= o.silence;
    if ((settled || silent_too_long) && !alive.empty() && alive.front() == o.rank) {
      std::this_thread::sleep_for(o.settle);  // let near-simultaneous deaths arrive
      alive = registered(store, o, settled);
      store.set(members_key, comm::to_bytes(fmt::format("{}", fmt::join(alive, ","))));
      continue;
    }
    std::this_thread::sleep_for(kPoll);
  }
  throw std::runtime_error(fmt::format("rank {}: no membership for epoch {} within {} ms", o.rank,
                                       o.epoch, o.deadline.count()));
}

}  // namespace ntp::train
