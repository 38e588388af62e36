#include "comm/port_budget.h"

#include <gtest/gtest.h>

#include <barrier>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "tests/comm/thread_ranks.h"

namespace ntp::comm {
namespace {

// The default range of Debian's kernels.
constexpr PortRange kDefaultRange{32768, 60999};

TEST(PortBudget, CountsOnePortPerPeerOfEveryGroup) {
  const RankGroups groups{144, 72, 2};
  EXPECT_EQ(groups.ports(), 143 + 2 * 71 + 1);
}

TEST(PortBudget, RefusesTheDp2Tp72JobOnOneHostThatFailedToConnect) {
  // 144 ranks x 286 ports = 41,184 > 28,232: this job, run on one host with
  // the default range, failed with "bind: Address already in use".
  const std::optional<std::string> message = port_shortfall(144, {144, 72, 2}, kDefaultRange);
  ASSERT_TRUE(message.has_value());
  EXPECT_NE(message->find("41184 ports"), std::string::npos) << *message;
  EXPECT_NE(message->find("28232 ephemeral ports"), std::string::npos) << *message;
  EXPECT_NE(message->find("ip_local_port_range (32768-60999)"), std::string::npos) << *message;
  // One replica per host (72 ranks, 20,592 ports) fits.
  EXPECT_FALSE(port_shortfall(72, {144, 72, 2}, kDefaultRange).has_value());
}

TEST(PortBudget, TheBoundaryIsTheRangeSize) {
  const RankGroups groups{5, 1, 1};  // 4 ports a rank
  EXPECT_FALSE(port_shortfall(25, groups, {1, 100}).has_value());
  EXPECT_TRUE(port_shortfall(26, groups, {1, 100}).has_value());
  EXPECT_TRUE(port_shortfall(1, groups, {10, 9}).has_value());  // an empty range holds nothing
}

TEST(PortBudget, ReadsTheKernelsRange) {
  if (!std::filesystem::exists("/proc/sys/net/ipv4/ip_local_port_range")) GTEST_SKIP() << "no /proc range";
  const std::optional<PortRange> range = ephemeral_port_range();
  ASSERT_TRUE(range.has_value());
  EXPECT_GT(range->size(), 0);
  EXPECT_LE(range->last, 65535);
}

// Local ports of this process's TCP sockets (IPv4 and IPv6), from /proc.
std::set<unsigned> own_tcp_ports() {
  std::set<std::string> inodes;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (!ec && target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::set<unsigned> ports;
  for (const char* table : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
      if (inodes.count(inode) == 0) continue;
      ports.insert(static_cast<unsigned>(std::stoul(local.substr(local.find(':') + 1), nullptr, 16)));
    }
  }
  return ports;
}

// The premise of the count: while a group of n ranks is open, each rank holds
// a port of its own for every peer. Should a Gloo version share one listener
// per process, this fails and port_shortfall must change with it.
TEST(PortBudget, AnOpenGroupHoldsAPortPerRankAndPeer) {
  if (!std::filesystem::exists("/proc/self/net/tcp")) GTEST_SKIP() << "no /proc/self/net/tcp";
  constexpr int kSize = 4;
  testing::TempStoreDir dir;
  const std::size_t before = own_tcp_ports().size();
  std::size_t during = 0;
  std::barrier all_open(kSize, [&]() noexcept { during = own_tcp_ports().size(); });
  const auto errors = testing::run_threads(kSize, [&](int rank) {
    auto store = open_store(dir.spec());
    const std::unique_ptr<Group> group = create_group(store, testing::group_options(kSize, rank, "ports"));
    all_open.arrive_and_wait();
    group->barrier();
  });
  for (const auto& e : errors) EXPECT_FALSE(e);
  EXPECT_GE(during, before + kSize * (kSize - 1)) << "ports before " << before << ", while open " << during;
}

}  // namespace
}  // namespace ntp::comm
