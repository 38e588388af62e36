#include "comm/counting_store.h"

#include "comm/error.h"

namespace ntp::comm {

namespace {

std::size_t size_of(const std::optional<std::vector<char>>& value) { return value ? value->size() : 0; }

}  // namespace

CountingStore::CountingStore(std::shared_ptr<Store> inner) : inner_(std::move(inner)) {
  if (!inner_) throw_bad_input("counting_store", "no store to count");
}

StoreCounts CountingStore::counts() const { return {operations_.load(), sent_.load(), received_.load()}; }

void CountingStore::count(std::size_t sent, std::size_t received) {
  operations_ += 1;
  sent_ += sent;
  received_ += received;
}

void CountingStore::set(const std::string& key, const std::vector<char>& value) {
  count(key.size() + value.size(), 0);
  inner_->set(key, value);
}

void CountingStore::set_expiring(const std::string& key, const std::vector<char>& value,
                                 std::chrono::milliseconds ttl) {
  count(key.size() + value.size(), 0);
  inner_->set_expiring(key, value, ttl);
}

bool CountingStore::create(const std::string& key, const std::vector<char>& value) {
  count(key.size() + value.size(), 0);
  return inner_->create(key, value);
}

std::optional<std::vector<char>> CountingStore::try_get(const std::string& key) {
  auto value = inner_->try_get(key);
  count(key.size(), size_of(value));
  return value;
}

void CountingStore::erase(const std::string& key) {
  count(key.size(), 0);
  inner_->erase(key);
}

std::size_t CountingStore::append(const std::string& key, const std::vector<char>& item) {
  count(key.size() + item.size(), 0);
  return inner_->append(key, item);
}

std::vector<std::vector<char>> CountingStore::items(const std::string& key, std::size_t from) {
  auto list = inner_->items(key, from);
  std::size_t received = 0;
  for (const auto& item : list) received += item.size();
  count(key.size(), received);
  return list;
}

std::optional<std::vector<char>> CountingStore::wait_first(const std::string& key, std::chrono::milliseconds timeout) {
  auto value = inner_->wait_first(key, timeout);
  count(key.size(), size_of(value));
  return value;
}

std::vector<std::optional<std::vector<char>>> CountingStore::get_many(const std::vector<std::string>& keys) {
  auto values = inner_->get_many(keys);
  std::size_t sent = 0, received = 0;
  for (const auto& key : keys) sent += key.size();
  for (const auto& value : values) received += size_of(value);
  count(sent, received);
  return values;
}

std::vector<std::optional<std::vector<char>>> CountingStore::get_slices(const std::vector<Slice>& slices) {
  auto values = inner_->get_slices(slices);
  std::size_t sent = 0, received = 0;
  for (const auto& slice : slices) sent += slice.key.size() + 2 * sizeof(std::uint64_t);
  for (const auto& value : values) received += size_of(value);
  count(sent, received);
  return values;
}

void CountingStore::erase_prefix(const std::string& prefix) {
  count(prefix.size(), 0);
  inner_->erase_prefix(prefix);
}

}  // namespace ntp::comm
