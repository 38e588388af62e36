#include "comm/port_budget.h"

#include <fstream>
#include <sstream>

#include "comm/gloo_mesh.h"

namespace ntp::comm {

// A sparse mesh's peers are the rotation of rank 0's by the rank, so every
// rank has as many.
std::int64_t RankGroups::sparse_peers(std::int64_t size) {
  return static_cast<std::int64_t>(mesh_peers(0, static_cast<int>(size), true).size());
}

std::optional<std::string> port_shortfall(std::int64_t ranks_here, const RankGroups& groups, const PortRange& range) {
  const std::int64_t need = ranks_here * groups.ports();
  if (need <= range.size()) return std::nullopt;
  std::ostringstream m;
  m << "this host runs " << ranks_here << " ranks, and each listens on one TCP port per peer of each of its Gloo "
    << "groups (world " << RankGroups::sparse_peers(groups.world) << " + tp 2 x " << groups.tp - 1 << " + dp "
    << RankGroups::sparse_peers(groups.dp);
  if (groups.pipeline > 1) m << " + pp " << groups.pipeline - 1;
  m << " = " << groups.ports() << "): " << need << " ports in all, more than the " << range.size()
    << " ephemeral ports of net.ipv4.ip_local_port_range (" << range.first << "-" << range.last
    << "). Widen the range (sysctl -w net.ipv4.ip_local_port_range=\"1024 65535\"), or run fewer ranks per "
    << "host (one training process per GPU, on several hosts)";
  return m.str();
}

std::optional<PortRange> ephemeral_port_range() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  PortRange range;
  if (!(in >> range.first >> range.last) || range.size() == 0) return std::nullopt;
  return range;
}

}  // namespace ntp::comm
