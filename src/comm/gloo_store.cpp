#include "comm/gloo_store.h"

#include <algorithm>

namespace ntp::comm {

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
