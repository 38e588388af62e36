#pragma once
// Rendezvous of one group: store key layout, the join step that every member
// passes before any connection is made, and the adapter that lets Gloo's
// connectFullMesh use our Store (with our deadlines and errors).
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "comm/group.h"

namespace ntp::comm {

// "ntp/e<epoch>/<name>/": everything of one group in one epoch lives below it.
std::string group_prefix(std::uint64_t epoch, const std::string& name);

// Publishes this rank's join record (its view of the membership) and waits
// for every member's. Throws CommError: kTimeout naming the ranks that did not
// join, kBadInput naming a rank whose membership list differs.
void join_group(Store& store, const std::string& prefix, const GroupOptions& opts,
                std::chrono::milliseconds timeout);

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
