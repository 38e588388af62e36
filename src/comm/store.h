#pragma once
// Store: the rendezvous key-value space that ranks use to find each other
// (addresses, join records, heartbeats). Two backends:
//   - a directory on a shared file system, one file per key (one host), and
//   - Redis (many hosts), through hiredis.
//
//   std::shared_ptr<Store> open_store(const std::string& spec);
//     spec: "file:/path/to/dir", a plain path "/path/to/dir",
//           or "redis://host:port[/namespace]", each optionally followed by
//           "?job=<id>": the keys of that job only (comm/job_store.h).
//
// Keys are plain strings ("ntp/e3/dp/core0/join/5"); values are bytes. Every
// blocking call has a deadline and throws CommError (kTimeout naming the keys
// still missing, kBadInput for an unreachable or unusable store).
// A Store may be shared by several threads.
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ntp::comm {

class Store {
 public:
  virtual ~Store() = default;

  // Sets (or overwrites) a key.
  virtual void set(const std::string& key, const std::vector<char>& value) = 0;
  // Compare-and-set: sets the key only if it does not exist, atomically across
  // threads, processes and hosts. Returns true if this call created it, false
  // if the key already existed (its value is then left unchanged), so of many
  // racing callers exactly one wins and the others can read the winner's value.
  virtual bool create(const std::string& key, const std::vector<char>& value) = 0;
  // Returns the value, or nothing if the key does not exist. Never waits.
  virtual std::optional<std::vector<char>> try_get(const std::string& key) = 0;
  // Sets (or overwrites) a key that the store itself removes `ttl` after it
  // received this call, unless set_expiring renews it first: a lease. The
  // expiry is the server's doing, so the holder's clock, and whether the
  // holder is still there, do not matter (Redis: SET PX; the file store: the
  // file's mtime, which needs the hosts' clocks in sync as heartbeats do). A
  // key is written either with set or with set_expiring, never both.
  virtual void set_expiring(const std::string& key, const std::vector<char>& value, std::chrono::milliseconds ttl) = 0;
  // Removes a key (no error if absent).
  virtual void erase(const std::string& key) = 0;
  // "file:/dir" or "redis://host:port/ns": for error messages.
  virtual std::string describe() const = 0;

  // ---- Lists, batched reads and prefix listing. They keep a rendezvous at
  // O(1) store operations per rank where the backend has the primitive
  // (Redis: RPUSH, LRANGE, MGET, a blocking LMOVE, SCAN); the defaults build
  // them from the calls above, one key per item ("<key>#<i>"), which costs
  // O(items) operations but works on any store.

  // Appends `item` to list `key` atomically; returns its 0-based position, so
  // of N appenders exactly one sees N-1.
  virtual std::size_t append(const std::string& key, const std::vector<char>& item);
  // The items of list `key` from position `from` on, in append order (empty
  // when it does not exist), so a reader that polls a growing list reads each
  // item once.
  virtual std::vector<std::vector<char>> items(const std::string& key, std::size_t from = 0);
  // Waits until list `key` has an item and returns the first, or nothing by
  // the deadline. Blocks in the server where it can; never consumes the item.
  virtual std::optional<std::vector<char>> wait_first(const std::string& key, std::chrono::milliseconds timeout);
  // The values of `keys` (nothing for an absent one), in one round trip where possible.
  virtual std::vector<std::optional<std::vector<char>>> get_many(const std::vector<std::string>& keys);
  // Parts of values: `length` bytes from `offset` of `key` each (nothing for
  // an absent key), in one round trip where possible; a reader that needs its
  // own part of each peer's record reads O(1) bytes per peer.
  struct Slice {
    std::string key;
    std::size_t offset = 0;
    std::size_t length = 0;
  };
  virtual std::vector<std::optional<std::vector<char>>> get_slices(const std::vector<Slice>& slices);
  // Removes every key (and list) whose name starts with `prefix`.
  virtual void erase_prefix(const std::string& prefix) = 0;

  // Waits until every key exists; on deadline throws CommError(kTimeout)
  // listing the missing keys. Polls try_get with a short backoff. `check`, if
  // set, runs between polls (at least every 20 ms) and may throw to give up
  // early, e.g. once a rank being waited for is known to be dead.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
            const std::function<void()>& check = {});
  // wait() for one key, then its value.
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout);
  // Returns the keys of `keys` that do not exist now.
  std::vector<std::string> missing(const std::vector<std::string>& keys);
};

std::shared_ptr<Store> open_store(const std::string& spec);

// Convenience for string values.
std::vector<char> to_bytes(const std::string& text);
std::string to_text(const std::vector<char>& bytes);

}  // namespace ntp::comm
