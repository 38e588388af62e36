#include "comm/rendezvous.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace ntp::comm {

CommError group_error(const GroupOptions& opts, CommErrorKind kind, const std::string& op, const std::string& detail,
                      int peer_global_rank) {
  CommErrorInfo info;
  info.kind = kind;
  info.group = opts.name;
  info.epoch = opts.epoch;
  info.rank = opts.global_rank;
  info.peer = peer_global_rank;
  info.op = op;
  info.detail = detail;
  return CommError(std::move(info));
}

std::string group_keys_prefix(std::uint64_t epoch) { return "ntp/groups/e" + std::to_string(epoch) + "/"; }

std::string group_prefix(std::uint64_t epoch, const std::string& name) { return group_keys_prefix(epoch) + name + "/"; }

namespace {

std::string membership_text(const std::vector<int>& ranks) {
  std::ostringstream out;
  for (std::size_t i = 0; i < ranks.size(); ++i) out << (i ? "," : "") << ranks[i];
  return out.str();
}

// FNV-1a: members compare 8 bytes instead of everyone's full list.
std::uint64_t membership_hash(const std::vector<int>& ranks) {
  std::uint64_t hash = 1469598103934665603ull;
  for (char c : membership_text(ranks)) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return hash;
}

// "<global rank> <members> <hash>"
struct Card {
  int rank = -1;
  std::size_t members = 0;
  std::uint64_t hash = 0;
};

std::vector<char> encode_card(const Card& card) {
  return to_bytes(std::to_string(card.rank) + " " + std::to_string(card.members) + " " + std::to_string(card.hash));
}

std::optional<Card> decode_card(const std::vector<char>& bytes) {
  Card card;
  std::istringstream in(to_text(bytes));
  if (!(in >> card.rank >> card.members >> card.hash)) return std::nullopt;
  return card;
}

constexpr const char* kDeadMark = "dead ";
constexpr const char* kAbandonedMark = "abandoned";

// Every member's card by group rank (nothing for one not joined yet), and the
// first foreign card whose membership differs from ours.
struct Roll {
  std::vector<std::optional<Card>> cards;
  std::optional<Card> dissenter;
};

Roll read_roll(Store& store, const std::string& prefix, const GroupOptions& opts, std::uint64_t hash) {
  Roll roll;
  roll.cards.resize(opts.ranks.size());
  for (const auto& bytes : store.items(join_list_key(prefix))) {
    auto card = decode_card(bytes);
    if (!card) continue;
    const auto it = std::find(opts.ranks.begin(), opts.ranks.end(), card->rank);
    if (card->hash != hash) {
      if (!roll.dissenter && it != opts.ranks.end()) roll.dissenter = card;
      continue;
    }
    if (it != opts.ranks.end()) roll.cards[static_cast<std::size_t>(it - opts.ranks.begin())] = std::move(card);
  }
  return roll;
}

std::vector<int> absent_ranks(const Roll& roll, const GroupOptions& opts) {
  std::vector<int> absent;
  for (std::size_t i = 0; i < roll.cards.size(); ++i) {
    if (!roll.cards[i]) absent.push_back(opts.ranks[i]);
  }
  return absent;
}

}  // namespace

std::string join_list_key(const std::string& prefix) { return prefix + "joined"; }

std::vector<char> join_card(const GroupOptions& opts) {
  return encode_card({opts.global_rank, opts.ranks.size(), membership_hash(opts.ranks)});
}

void join_group(Store& store, const std::string& prefix, const GroupOptions& opts, std::chrono::milliseconds timeout) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + timeout;
  const std::uint64_t hash = membership_hash(opts.ranks);
  const std::string ready_key = prefix + "ready";
  const std::size_t n = opts.ranks.size();
  const std::size_t position = store.append(join_list_key(prefix), join_card(opts));
  if (position + 1 >= n) store.append(ready_key, to_bytes("all"));
  Roll roll;
  {
    // A rank that sees a member die wakes everyone still waiting.
    DeathWatch watch(opts, "joining", [&](const CommError& e) {
      store.append(ready_key, to_bytes(e.peer() >= 0 ? kDeadMark + std::to_string(e.peer()) : kAbandonedMark));
    });
    auto pause = std::chrono::milliseconds(1);
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
      const auto first = left.count() > 0 ? store.wait_first(ready_key, left) : std::nullopt;
      watch.throw_if_fired();
      if (first && to_text(*first).rfind(kDeadMark, 0) == 0) {
        const int dead = std::atoi(to_text(*first).c_str() + std::strlen(kDeadMark));
        throw group_error(opts, CommErrorKind::kPeerError, "create_group",
                          "rank " + std::to_string(dead) + " is dead (GroupOptions::is_dead) while joining", dead);
      }
      if (first && to_text(*first) == kAbandonedMark) {
        throw group_error(opts, CommErrorKind::kBroken, "create_group",
                          "a member saw the epoch abandoned (GroupOptions::abandoned) while joining");
      }
      roll = read_roll(store, prefix, opts, hash);
      // A reissued append can wake the group early: then poll the roll.
      if (roll.dissenter || absent_ranks(roll, opts).empty() || clock::now() >= deadline) break;
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(20));
    }
  }
  if (roll.dissenter) {
    const Card& c = *roll.dissenter;
    throw group_error(opts, CommErrorKind::kBadInput, "create_group",
                      "rank " + std::to_string(c.rank) + " joined with a different list of " +
                          std::to_string(c.members) + " members but rank " + std::to_string(opts.global_rank) +
                          " has {" + membership_text(opts.ranks) + "}",
                      c.rank);
  }
  const std::vector<int> absent = absent_ranks(roll, opts);
  if (!absent.empty()) {
    throw group_error(opts, CommErrorKind::kTimeout, "create_group",
                      "rank(s) " + membership_text(absent) + " did not join within " +
                          std::to_string(timeout.count()) + " ms (store " + store.describe() + ")",
                      absent.front());
  }
}

DeathWatch::DeathWatch(const GroupOptions& opts, std::string phase, std::function<void(const CommError&)> on_death)
    : opts_(opts), phase_(std::move(phase)), on_death_(std::move(on_death)) {
  if (opts_.is_dead || opts_.abandoned) thread_ = std::thread([this] { run(); });
}

DeathWatch::~DeathWatch() { stop(); }

void DeathWatch::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void DeathWatch::throw_if_fired() const {
  std::lock_guard lock(mutex_);
  if (fired_) throw *fired_;
}

std::optional<int> DeathWatch::first_dead_member() const {
  if (!opts_.is_dead) return std::nullopt;
  for (int r : opts_.ranks) {
    if (r != opts_.global_rank && opts_.is_dead(r)) return r;
  }
  return std::nullopt;
}

void DeathWatch::run() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    std::optional<int> dead;
    bool abandoned = false;
    try {
      abandoned = opts_.abandoned && opts_.abandoned();
      if (!abandoned) dead = first_dead_member();
    } catch (const std::exception&) {
      // A failing oracle knows nothing: keep waiting for the deadline.
    }
    lock.lock();
    if (abandoned) {
      fired_ = group_error(opts_, CommErrorKind::kBroken, "create_group",
                           "the epoch was abandoned (GroupOptions::abandoned) while " + phase_ +
                               "; giving up before the deadline");
    } else if (dead) {
      fired_ = group_error(opts_, CommErrorKind::kPeerError, "create_group",
                           "rank " + std::to_string(*dead) + " is dead (GroupOptions::is_dead) while " + phase_ +
                               "; giving up before the deadline",
                           *dead);
    }
    if (fired_) {
      const CommError error = *fired_;
      lock.unlock();
      if (on_death_) on_death_(error);
      return;
    }
    stop_cv_.wait_for(lock, kPollInterval, [this] { return stopping_; });
  }
}

}  // namespace ntp::comm
