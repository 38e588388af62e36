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
    store.wait(keys, timeout);
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

}  // namespace ntp::comm
