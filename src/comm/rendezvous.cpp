#include "comm/rendezvous.h"

#include <algorithm>
#include <sstream>

namespace ntp::comm {

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

CommErrorInfo join_error(const GroupOptions& opts, CommErrorKind kind) {
  CommErrorInfo info;
  info.kind = kind;
  info.group = opts.name;
  info.epoch = opts.epoch;
  info.rank = opts.global_rank;
  info.op = "create_group";
  return info;
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
    CommErrorInfo info = join_error(opts, CommErrorKind::kTimeout);
    info.peer = absent.empty() ? -1 : absent.front();
    info.detail = "rank(s) " + membership_text(absent) + " did not join within " + std::to_string(timeout.count()) +
                  " ms (store " + store.describe() + ")";
    throw CommError(std::move(info));
  }
  for (int r : opts.ranks) {
    const std::string theirs = to_text(store.get(join_key(prefix, r), timeout));
    if (theirs != mine) {
      CommErrorInfo info = join_error(opts, CommErrorKind::kBadInput);
      info.peer = r;
      info.detail = "rank " + std::to_string(r) + " joined with members {" + theirs + "} but rank " +
                    std::to_string(opts.global_rank) + " has {" + mine + "}";
      throw CommError(std::move(info));
    }
  }
}

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  store_.set(prefix_ + key, data);
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) { return store_.get(prefix_ + key, timeout_); }

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void GlooStoreAdapter::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  std::vector<std::string> full;
  for (const auto& key : keys) full.push_back(prefix_ + key);
  store_.wait(full, std::min(timeout, timeout_));
}

}  // namespace ntp::comm
