#pragma once
// Lets Gloo's connectFullMesh use our Store, under a key prefix and with our
// deadline: a missing peer becomes CommError(kTimeout) naming the key.
#include <chrono>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "comm/store.h"

namespace ntp::comm {

// gloo::rendezvous::Store over our Store, under a key prefix, with a deadline.
class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(ntp::comm::Store& store, std::string prefix, std::chrono::milliseconds timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  ntp::comm::Store& store_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

}  // namespace ntp::comm
