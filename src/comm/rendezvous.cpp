#include "comm/rendezvous.h"

#include <algorithm>
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

std::string group_prefix(std::uint64_t epoch, const std::string& name) {
  return "ntp/e" + std::to_string(epoch) + "/" + name + "/";
}

namespace {

std::string join_key(const std::string& prefix, int global_rank) {
  return prefix + "join/" + std::to_string(global_rank);
}

std::string membership_text(const std::vector<int>& ranks) {
  std::ostringstream out;
  for (std::size_t i = 0; i < ranks.size(); ++i) out << (i ? "," : "") << ranks[i];
  return out.str();
}

}  // namespace

void join_group(Store& store, const std::string& prefix, const GroupOptions& opts,
                std::chrono::milliseconds timeout) {
  const std::string mine = membership_text(opts.ranks);
  store.set(join_key(prefix, opts.global_rank), to_bytes(mine));
  std::vector<std::string> keys;
  for (int r : opts.ranks) keys.push_back(join_key(prefix, r));
  try {
    DeathWatch watch(opts, "joining");
    store.wait(keys, timeout, watch.check());
  } catch (const CommError& e) {
    if (e.kind() != CommErrorKind::kTimeout) throw;
    std::vector<int> absent;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (!store.try_get(keys[i])) absent.push_back(opts.ranks[i]);
    }
    throw group_error(opts, CommErrorKind::kTimeout, "create_group",
                      "rank(s) " + membership_text(absent) + " did not join within " +
                          std::to_string(timeout.count()) + " ms (store " + store.describe() + ")",
                      absent.empty() ? -1 : absent.front());
  }
  for (int r : opts.ranks) {
    const std::string theirs = to_text(store.get(join_key(prefix, r), timeout));
    if (theirs != mine) {
      throw group_error(opts, CommErrorKind::kBadInput, "create_group",
                        "rank " + std::to_string(r) + " joined with members {" + theirs + "} but rank " +
                            std::to_string(opts.global_rank) + " has {" + mine + "}",
                        r);
    }
  }
}

DeathWatch::DeathWatch(const GroupOptions& opts, std::string phase, std::function<void(const CommError&)> on_death)
    : opts_(opts), phase_(std::move(phase)), on_death_(std::move(on_death)) {
  if (opts_.is_dead) thread_ = std::thread([this] { run(); });
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
    try {
      dead = first_dead_member();
    } catch (const std::exception&) {
      // A failing oracle knows nothing: keep waiting for the deadline.
    }
    lock.lock();
    if (dead) {
      fired_ = group_error(opts_, CommErrorKind::kPeerError, "create_group",
                           "rank " + std::to_string(*dead) + " is dead (GroupOptions::is_dead) while " + phase_ +
                               "; giving up before the deadline",
                           *dead);
      const CommError error = *fired_;
      lock.unlock();
      if (on_death_) on_death_(error);
      return;
    }
    stop_cv_.wait_for(lock, kPollInterval, [this] { return stopping_; });
  }
}

}  // namespace ntp::comm
