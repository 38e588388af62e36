#pragma once
// Rendezvous of one group, common to all backends: store key layout, the
// join step that every member passes before any connection is made, and the
// group-level error helper.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/group.h"

namespace ntp::comm {

// A CommError about the group `opts` describes (its name, epoch and this rank).
CommError group_error(const GroupOptions& opts, CommErrorKind kind, const std::string& op, const std::string& detail,
                      int peer_global_rank = -1);

// "ntp/e<epoch>/<name>/": everything of one group in one epoch lives below it.
std::string group_prefix(std::uint64_t epoch, const std::string& name);

// Publishes this rank's join record (its view of the membership) and waits
// for every member's. Throws CommError: kTimeout naming the ranks that did not
// join, kBadInput naming a rank whose membership list differs.
void join_group(Store& store, const std::string& prefix, const GroupOptions& opts,
                std::chrono::milliseconds timeout);

}  // namespace ntp::comm
