// Every collective against a locally computed reference, for group sizes
// 1..8 with ranks as threads, including uneven counts (and zeros) in the -v forms.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "tests/comm/thread_ranks.h"

namespace ntp::comm {
namespace {

using testing::run_group;

// Uneven per-rank counts, with a zero for rank 1 when the group has 3+ ranks.
std::vector<std::size_t> uneven_counts(int size, int salt = 0) {
  std::vector<std::size_t> counts;
  for (int r = 0; r < size; ++r) counts.push_back(r == 1 && size >= 3 ? 0 : static_cast<std::size_t>(3 + (r * 7 + salt) % 11));
  return counts;
}

std::size_t sum(const std::vector<std::size_t>& v) { return std::accumulate(v.begin(), v.end(), std::size_t{0}); }

double element(int rank, std::size_t i) { return rank * 1000.0 + static_cast<double>(i); }

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, AllGather) {
  const int n = GetParam();
  run_group(n, "ag", [&](Group& g) {
    std::vector<double> in(5), out(5 * static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = element(g.rank(), i);
    g.all_gather(in, out);
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < 5; ++i) ASSERT_EQ(out[static_cast<std::size_t>(r) * 5 + i], element(r, i));
  });
}

TEST_P(Collectives, AllGatherVUneven) {
  const int n = GetParam();
  const auto counts = uneven_counts(n);
  run_group(n, "agv", [&](Group& g) {
    std::vector<float> in(counts[static_cast<std::size_t>(g.rank())]), out(sum(counts));
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(element(g.rank(), i));
    g.all_gather_v(in, out, counts);
    std::size_t offset = 0;
    for (int r = 0; r < n; ++r) {
      for (std::size_t i = 0; i < counts[static_cast<std::size_t>(r)]; ++i) {
        ASSERT_EQ(out[offset + i], static_cast<float>(element(r, i))) << "block of rank " << r;
      }
      offset += counts[static_cast<std::size_t>(r)];
    }
  });
}

TEST_P(Collectives, ReduceScatterUneven) {
  const int n = GetParam();
  const auto counts = uneven_counts(n, 5);
  run_group(n, "rs", [&](Group& g) {
    std::vector<double> in(sum(counts));
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = element(g.rank(), i);
    std::vector<double> out(counts[static_cast<std::size_t>(g.rank())]);
    g.reduce_scatter(in, out, counts);
    std::size_t offset = 0;
    for (int r = 0; r < g.rank(); ++r) offset += counts[static_cast<std::size_t>(r)];
    for (std::size_t i = 0; i < out.size(); ++i) {
      double expected = 0;
      for (int r = 0; r < n; ++r) expected += element(r, offset + i);
      ASSERT_EQ(out[i], expected);
    }
  });
}

TEST_P(Collectives, ReduceScatterMaxFloat) {
  const int n = GetParam();
  const std::vector<std::size_t> counts(static_cast<std::size_t>(n), 4);
  run_group(n, "rsmax", [&](Group& g) {
    std::vector<float> in(sum(counts));
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>((g.rank() * 37 + static_cast<int>(i) * 11) % 23);
    std::vector<float> out(4);
    g.reduce_scatter(in, out, counts, ReduceOp::kMax);
    for (std::size_t i = 0; i < 4; ++i) {
      const std::size_t at = static_cast<std::size_t>(g.rank()) * 4 + i;
      float expected = -1;
      for (int r = 0; r < n; ++r) expected = std::max(expected, static_cast<float>((r * 37 + static_cast<int>(at) * 11) % 23));
      ASSERT_EQ(out[i], expected);
    }
  });
}

// Rank s sends (s + d) % 4 + (s == d) elements to rank d: uneven both ways.
std::size_t a2a_count(int src, int dst) { return static_cast<std::size_t>((src + dst) % 4 + (src == dst ? 1 : 0)); }

TEST_P(Collectives, AllToAllVUneven) {
  const int n = GetParam();
  run_group(n, "a2a", [&](Group& g) {
    const int me = g.rank();
    std::vector<std::size_t> send_counts, recv_counts;
    for (int r = 0; r < n; ++r) {
      send_counts.push_back(a2a_count(me, r));
      recv_counts.push_back(a2a_count(r, me));
    }
    std::vector<std::int64_t> in, out(sum(recv_counts));
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < a2a_count(me, r); ++i) in.push_back(me * 10000 + r * 100 + static_cast<int>(i));
    g.all_to_all_v(in, send_counts, out, recv_counts);
    std::size_t k = 0;
    for (int src = 0; src < n; ++src)
      for (std::size_t i = 0; i < a2a_count(src, me); ++i, ++k) ASSERT_EQ(out[k], src * 10000 + me * 100 + static_cast<int>(i));
  });
}

TEST_P(Collectives, BroadcastFromEveryRoot) {
  const int n = GetParam();
  run_group(n, "bc", [&](Group& g) {
    for (int root = 0; root < n; ++root) {
      std::vector<float> data(17, g.rank() == root ? static_cast<float>(root + 0.5) : -1.0f);
      g.broadcast(data, root);
      for (float x : data) ASSERT_EQ(x, static_cast<float>(root + 0.5));
    }
  });
}

TEST_P(Collectives, ExchangeRing) {
  const int n = GetParam();
  if (n == 1) GTEST_SKIP() << "point-to-point needs two ranks";
  run_group(n, "p2p", [&](Group& g) {
    const int next = (g.rank() + 1) % n, prev = (g.rank() + n - 1) % n;
    std::vector<double> out(9, g.rank() + 0.25), in(9, 0);
    std::vector<double> out2(3, g.rank() * 2.0), in2(3, 0);
    // Two tags in flight, listed in the opposite order on the receiving side.
    g.exchange({P2POp::send(out, next, 7), P2POp::send(out2, next, 8), P2POp::recv(in2, prev, 8),
                P2POp::recv(in, prev, 7)});
    for (double x : in) ASSERT_EQ(x, prev + 0.25);
    for (double x : in2) ASSERT_EQ(x, prev * 2.0);
  });
}

TEST_P(Collectives, BlockingSendRecvPairs) {
  const int n = GetParam();
  if (n == 1) GTEST_SKIP() << "point-to-point needs two ranks";
  run_group(n, "sendrecv", [&](Group& g) {
    // Rank 0 talks to everyone in turn: send, then receive the answer.
    if (g.rank() == 0) {
      for (int r = 1; r < n; ++r) {
        std::vector<std::int32_t> ask(4, r), answer(4, 0);
        g.send(ask, r, 1);
        g.recv(answer, r, 2);
        for (auto x : answer) ASSERT_EQ(x, r * r);
      }
    } else {
      std::vector<std::int32_t> ask(4, 0);
      g.recv(ask, 0, 1);
      for (auto& x : ask) x *= x;
      g.send(ask, 0, 2);
    }
  });
}

TEST_P(Collectives, Barrier) {
  const int n = GetParam();
  run_group(n, "barrier", [&](Group& g) {
    for (int i = 0; i < 3; ++i) g.barrier();
  });
}

INSTANTIATE_TEST_SUITE_P(GroupSize, Collectives, ::testing::Range(1, 9));

TEST(Collectives, WithoutCallChecks) {
  testing::TempStoreDir dir;
  auto store = open_store(dir.spec());
  testing::rethrow_first(testing::run_threads(4, [&](int rank) {
    auto opts = testing::group_options(4, rank, "nocheck");
    opts.check_inputs = false;
    auto g = create_group(store, opts);
    std::vector<double> data(100, rank);
    g->all_reduce(data.data(), data.size());
    EXPECT_EQ(data[99], 6.0);
    std::vector<double> all(400);
    g->all_gather(std::vector<double>(100, rank), all);
    EXPECT_EQ(all[399], 3.0);
    g->barrier();
    std::vector<double> b(10, rank == 2 ? 9.0 : 0.0);
    g->broadcast(b, 2);
    EXPECT_EQ(b[9], 9.0);
  }));
}

}  // namespace
}  // namespace ntp::comm
