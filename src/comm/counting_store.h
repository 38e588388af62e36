#pragma once
// CountingStore: a Store that forwards every call to another and counts the
// calls and the bytes they carry (keys and values sent, values received), so
// the control plane's cost per rank can be measured and asserted on.
//
//   auto counted = std::make_shared<CountingStore>(open_store(spec));
//   create_group(counted, opts);
//   StoreCounts c = counted->counts();   // c.operations, c.bytes()
//
// One call counts as one operation: on Redis that is one round trip (the
// list calls are single commands there); on a store that builds lists from
// single keys the inner store makes more.
#include <atomic>
#include <cstdint>
#include <memory>

#include "comm/store.h"

namespace ntp::comm {

struct StoreCounts {
  std::uint64_t operations = 0;
  std::uint64_t bytes_sent = 0;      // keys and values
  std::uint64_t bytes_received = 0;  // values
  std::uint64_t bytes() const { return bytes_sent + bytes_received; }
  StoreCounts operator-(const StoreCounts& earlier) const {
    return {operations - earlier.operations, bytes_sent - earlier.bytes_sent,
            bytes_received - earlier.bytes_received};
  }
};

class CountingStore : public Store {
 public:
  explicit CountingStore(std::shared_ptr<Store> inner);

  StoreCounts counts() const;

  void set(const std::string& key, const std::vector<char>& value) override;
  bool create(const std::string& key, const std::vector<char>& value) override;
  void set_expiring(const std::string& key, const std::vector<char>& value, std::chrono::milliseconds ttl) override;
  std::optional<std::vector<char>> try_get(const std::string& key) override;
  void erase(const std::string& key) override;
  std::string describe() const override { return inner_->describe(); }
  std::size_t append(const std::string& key, const std::vector<char>& item) override;
  std::vector<std::vector<char>> items(const std::string& key, std::size_t from = 0) override;
  std::optional<std::vector<char>> wait_first(const std::string& key, std::chrono::milliseconds timeout) override;
  std::vector<std::optional<std::vector<char>>> get_many(const std::vector<std::string>& keys) override;
  void erase_prefix(const std::string& prefix) override;
  std::vector<std::optional<std::vector<char>>> get_slices(const std::vector<Slice>& slices) override;

 private:
  void count(std::size_t sent, std::size_t received);

  std::shared_ptr<Store> inner_;
  std::atomic<std::uint64_t> operations_{0};
  std::atomic<std::uint64_t> sent_{0};
  std::atomic<std::uint64_t> received_{0};
};

}  // namespace ntp::comm
