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
  // The sparse world: 1, 2, ..., 128 either way, 16 and 128 met twice.
  EXPECT_EQ(RankGroups::sparse_peers(144), 14);
  EXPECT_EQ(RankGroups::sparse_peers(1250), 22);  // dp of 10,000 ranks at tp 8
  EXPECT_EQ(groups.ports(), 14 + 2 * 71 + 1);
}

TEST(PortBudget, RefusesAJobWhoseRanksOnOneHostNeedMorePortsThanTheRange) {
  // dp 4 x tp 72 on one host: 288 ranks x (16 + 142 + 3) = 46,368 > 28,232.
  const std::optional<std::string> message = port_shortfall(288, {288, 72, 4}, kDefaultRange);
  ASSERT_TRUE(message.has_value());
  EXPECT_NE(message->find("46368 ports"), std::string::npos) << *message;
  EXPECT_NE(message->find("world 16 + tp 2 x 71 + dp 3"), std::string::npos) << *message;
  EXPECT_NE(message->find("28232 ephemeral ports"), std::string::npos) << *message;
  EXPECT_NE(message->find("ip_local_port_range (32768-60999)"), std::string::npos) << *message;
  // dp 2 x tp 72 (144 ranks, 22,608 ports) fits now that the world group is
  // sparse; with a full world mesh it needed 41,184 and failed to bind.
  EXPECT_FALSE(port_shortfall(144, {144, 72, 2}, kDefaultRange).has_value());
}

// With stages each rank also holds its replica's pipeline group, a full mesh
// of pp x tp ranks: dp 2 x pp 8 x tp 8 on one host (256 ranks) needs
// 256 x (15 + 14 + 1 + 63) = 23,808 ports and fits the default range; the same
// job counted without the pipeline group looked like 7,680.
TEST(PortBudget, APipelineGroupCountsItsPeersToo) {
  const RankGroups staged{256, 8, 2, 64};
  EXPECT_EQ(staged.ports(), RankGroups::sparse_peers(256) + 2 * 7 + 1 + 63);
  EXPECT_FALSE(port_shortfall(256, staged, kDefaultRange).has_value());
  // dp 4 x pp 8 x tp 16 (512 ranks, 127 pipeline peers each) does not.
  const std::optional<std::string> message = port_shortfall(512, {512, 16, 4, 128}, kDefaultRange);
  ASSERT_TRUE(message.has_value());
  EXPECT_NE(message->find("+ pp 127 = "), std::string::npos) << *message;
  EXPECT_FALSE(port_shortfall(512, {512, 16, 4}, kDefaultRange).has_value()) << "the pipeline group decides it";
}

TEST(PortBudget, TheBoundaryIsTheRangeSize) {
  const RankGroups groups{5, 1, 1};  // 4 ports a rank (a sparse mesh of 5 holds every pair)
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

// This process's TCP sockets (IPv4 and IPv6), from /proc: local port and state.
struct TcpSocket {
  unsigned port = 0;
  std::string state;  // "01": established, "0A": listening
};

std::vector<TcpSocket> own_tcp_sockets() {
  std::set<std::string> inodes;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (!ec && target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::vector<TcpSocket> sockets;
  for (const char* table : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
      if (inodes.count(inode) == 0) continue;
      sockets.push_back({static_cast<unsigned>(std::stoul(local.substr(local.find(':') + 1), nullptr, 16)), state});
    }
  }
  return sockets;
}

std::set<unsigned> own_tcp_ports() {
  std::set<unsigned> ports;
  for (const TcpSocket& s : own_tcp_sockets()) ports.insert(s.port);
  return ports;
}

std::size_t own_established_sockets() {
  std::size_t n = 0;
  for (const TcpSocket& s : own_tcp_sockets()) n += s.state == "01";
  return n;
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

// And a sparse group holds a connection per rank and mesh peer only, the
// world group's count above (its ports follow: the accepting end's listening
// port per connection, and the connecting end's, which the kernel may share
// between connections to different peers).
TEST(PortBudget, AnOpenSparseGroupHoldsAConnectionPerRankAndMeshPeer) {
  if (!std::filesystem::exists("/proc/self/net/tcp")) GTEST_SKIP() << "no /proc/self/net/tcp";
  constexpr int kSize = 17;  // 8 mesh peers a rank, against 16 in a full mesh
  testing::TempStoreDir dir;
  const std::size_t before = own_established_sockets();
  std::size_t during = 0;
  std::barrier all_open(kSize, [&]() noexcept { during = own_established_sockets(); });
  const auto errors = testing::run_threads(kSize, [&](int rank) {
    auto store = open_store(dir.spec());
    GroupOptions opts = testing::group_options(kSize, rank, "sparse-ports");
    opts.sparse = true;
    const std::unique_ptr<Group> group = create_group(store, opts);
    all_open.arrive_and_wait();
    group->barrier();
  });
  for (const auto& e : errors) EXPECT_FALSE(e);
  // Both ends of every connection live in this process.
  EXPECT_EQ(during - before, kSize * static_cast<std::size_t>(RankGroups::sparse_peers(kSize)))
      << "established before " << before << ", while open " << during;
}

}  // namespace
}  // namespace ntp::comm
