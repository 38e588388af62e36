#pragma once
// How many TCP ports the Gloo groups of a job take on one address, against the
// kernel's ephemeral range. The Gloo TCP transport this project builds on gives
// every pair of a group its own listening socket, bound to an ephemeral port of
// the rank's address: a rank holds one port per peer per group, so a host that
// runs R ranks of an N-rank job needs about R·(2·log2 N + 2·(tp−1) + 2·log2 dp
// + pp·tp − 1) ports while its groups are open (the world and DP groups are
// sparse; the pipeline group, with stages only, is full). Past the range, group creation fails with "bind:
// Address already in use" half way through connecting; checking first turns
// that into one clear message before any worker starts.
#include <cstdint>
#include <optional>
#include <string>

namespace ntp::comm {

struct PortRange {
  std::int64_t first = 0;
  std::int64_t last = -1;
  std::int64_t size() const { return last >= first ? last - first + 1 : 0; }
};

// The groups one training rank opens (src/train/ntp_trainer.cpp): world and
// the DP sync group (sparse meshes, GroupOptions::sparse), two full TP
// groups (compute and the sync thread) and, with pipeline stages, the full
// pipeline group of its replica's ranks over every stage. Fields are group
// sizes (pipeline 1: no stages).
struct RankGroups {
  std::int64_t world = 1;
  std::int64_t tp = 1;
  std::int64_t dp = 1;
  std::int64_t pipeline = 1;
  std::int64_t ports() const { return sparse_peers(world) + 2 * (tp - 1) + sparse_peers(dp) + (pipeline - 1); }
  // Peers of each rank of a sparse mesh of `size` (the same for every rank).
  static std::int64_t sparse_peers(std::int64_t size);
};

// The message naming the shortfall when `ranks_here` ranks on one address need
// more ports than `range` holds; nullopt when they fit.
std::optional<std::string> port_shortfall(std::int64_t ranks_here, const RankGroups& groups, const PortRange& range);

// net.ipv4.ip_local_port_range; nullopt where it cannot be read (not Linux).
std::optional<PortRange> ephemeral_port_range();

}  // namespace ntp::comm
