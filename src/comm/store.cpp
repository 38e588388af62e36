#include "comm/store.h"

#include <sstream>
#include <thread>

#include "comm/error.h"
#include "comm/file_store.h"
#include "comm/job_store.h"
#include "comm/redis_store.h"

namespace ntp::comm {

std::vector<std::string> Store::missing(const std::vector<std::string>& keys) {
  std::vector<std::string> absent;
  for (const auto& key : keys) {
    if (!try_get(key)) absent.push_back(key);
  }
  return absent;
}

void Store::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                 const std::function<void()>& check) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + timeout;
  // Short first polls keep rendezvous fast; the backoff keeps an idle wait cheap.
  auto pause = std::chrono::microseconds(200);
  std::vector<std::string> pending = keys;
  while (true) {
    pending = missing(pending);
    if (pending.empty()) return;
    if (clock::now() >= deadline) break;
    if (check) check();
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(20000));
  }
  std::ostringstream detail;
  detail << "timed out after " << timeout.count() << " ms waiting for " << pending.size()
         << " key(s) in " << describe() << ":";
  for (std::size_t i = 0; i < pending.size() && i < 8; ++i) detail << " " << pending[i];
  if (pending.size() > 8) detail << " ...";
  CommErrorInfo info;
  info.kind = CommErrorKind::kTimeout;
  info.op = "store.wait";
  info.detail = detail.str();
  throw CommError(std::move(info));
}

std::vector<char> Store::get(const std::string& key, std::chrono::milliseconds timeout) {
  wait({key}, timeout);
  auto value = try_get(key);
  if (!value) throw_bad_input("store.get", "key " + key + " vanished from " + describe());
  return *value;
}

namespace {

std::string item_key(const std::string& key, std::size_t index) { return key + "#" + std::to_string(index); }

}  // namespace

// create() is atomic, so the first free "<key>#<i>" is this caller's slot.
std::size_t Store::append(const std::string& key, const std::vector<char>& item) {
  for (std::size_t i = 0;; ++i) {
    if (create(item_key(key, i), item)) return i;
  }
}

std::vector<std::vector<char>> Store::items(const std::string& key, std::size_t from) {
  std::vector<std::vector<char>> out;
  while (auto item = try_get(item_key(key, from + out.size()))) out.push_back(std::move(*item));
  return out;
}

std::optional<std::vector<char>> Store::wait_first(const std::string& key, std::chrono::milliseconds timeout) {
  try {
    return get(item_key(key, 0), timeout);
  } catch (const CommError& e) {
    if (e.kind() == CommErrorKind::kTimeout) return std::nullopt;
    throw;
  }
}

std::vector<std::optional<std::vector<char>>> Store::get_many(const std::vector<std::string>& keys) {
  std::vector<std::optional<std::vector<char>>> values;
  values.reserve(keys.size());
  for (const auto& key : keys) values.push_back(try_get(key));
  return values;
}

std::vector<std::optional<std::vector<char>>> Store::get_slices(const std::vector<Slice>& slices) {
  std::vector<std::optional<std::vector<char>>> values;
  for (const Slice& slice : slices) {
    auto value = try_get(slice.key);
    if (value && slice.offset < value->size()) {
      const auto begin = value->begin() + static_cast<std::ptrdiff_t>(slice.offset);
      const auto end = value->begin() + static_cast<std::ptrdiff_t>(std::min(value->size(), slice.offset + slice.length));
      values.emplace_back(std::vector<char>(begin, end));
    } else {
      values.emplace_back(std::nullopt);
    }
  }
  return values;
}

std::shared_ptr<Store> open_store(const std::string& spec) {
  if (const std::string job = job_of(spec); !job.empty()) {
    return join_job(open_store(without_job(spec)), job, std::chrono::seconds(10));
  }
  if (spec.empty()) throw_bad_input("open_store", "empty store spec (want file:/dir or redis://host:port)");
  const std::string file_scheme = "file:";
  const std::string redis_scheme = "redis://";
  if (spec.rfind(redis_scheme, 0) == 0) return open_redis_store(spec);
  if (spec.rfind(file_scheme, 0) == 0) return std::make_shared<FileStore>(spec.substr(file_scheme.size()));
  if (spec.find("://") != std::string::npos) {
    throw_bad_input("open_store", "unknown store scheme in '" + spec + "' (want file:/dir or redis://host:port)");
  }
  return std::make_shared<FileStore>(spec);
}

std::vector<char> to_bytes(const std::string& text) { return {text.begin(), text.end()}; }

std::string to_text(const std::vector<char>& bytes) { return {bytes.begin(), bytes.end()}; }

}  // namespace ntp::comm
