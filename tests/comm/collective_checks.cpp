#include "tests/comm/collective_checks.h"

#include <algorithm>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace ntp::comm::testing {

namespace {

template <class T>
void expect_eq(T got, T want, const char* what, int rank, std::size_t index) {
  if (got == want) return;
  std::ostringstream out;
  out << what << ": rank " << rank << " element " << index << " is " << got << ", expected " << want;
  throw std::runtime_error(out.str());
}

// Uneven per-rank counts, with a zero for rank 1 when the group has 3+ ranks.
std::vector<std::size_t> uneven_counts(int size, int salt) {
  std::vector<std::size_t> counts;
  for (int r = 0; r < size; ++r) {
    counts.push_back(r == 1 && size >= 3 ? 0 : static_cast<std::size_t>(3 + (r * 7 + salt) % 11));
  }
  return counts;
}

std::size_t sum(const std::vector<std::size_t>& v) { return std::accumulate(v.begin(), v.end(), std::size_t{0}); }

// Distinct, exactly representable values per (rank, index) so sums are exact.
double element(int rank, std::size_t i) { return rank * 1000.0 + static_cast<double>(i % 997) * 0.25; }

std::size_t at(int i) { return static_cast<std::size_t>(i); }

template <class T>
void check_all_reduce_op(Group& g, std::size_t count, ReduceOp op) {
  std::vector<T> data(count);
  for (std::size_t i = 0; i < count; ++i) data[i] = static_cast<T>(element(g.rank(), i));
  g.all_reduce(data.data(), count, op);
  for (std::size_t i = 0; i < count; ++i) {
    T want = static_cast<T>(element(0, i));
    for (int r = 1; r < g.size(); ++r) {
      const T x = static_cast<T>(element(r, i));
      want = op == ReduceOp::kSum ? want + x : std::max(want, x);
    }
    expect_eq(data[i], want, "all_reduce", g.rank(), i);
  }
}

// Rank s sends (s + d) % 4 + (s == d) elements to rank d: uneven both ways.
std::size_t a2a_count(int src, int dst) { return static_cast<std::size_t>((src + dst) % 4 + (src == dst ? 1 : 0)); }

}  // namespace

void check_all_reduce(Group& g, std::size_t count) {
  check_all_reduce_op<float>(g, count, ReduceOp::kSum);
  check_all_reduce_op<float>(g, count, ReduceOp::kMax);
  check_all_reduce_op<double>(g, count, ReduceOp::kSum);
  check_all_reduce_op<double>(g, count, ReduceOp::kMax);
}

void check_all_gather(Group& g) {
  const int n = g.size();
  std::vector<double> in(5), out(5 * at(n));
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = element(g.rank(), i);
  g.all_gather(in, out);
  for (int r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < 5; ++i) expect_eq(out[at(r) * 5 + i], element(r, i), "all_gather", g.rank(), i);
  }
}

void check_all_gather_v(Group& g) {
  const int n = g.size();
  const auto counts = uneven_counts(n, 0);
  std::vector<float> in(counts[at(g.rank())]), out(sum(counts));
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(element(g.rank(), i));
  g.all_gather_v(in, out, counts);
  std::size_t offset = 0;
  for (int r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < counts[at(r)]; ++i) {
      expect_eq(out[offset + i], static_cast<float>(element(r, i)), "all_gather_v", g.rank(), offset + i);
    }
    offset += counts[at(r)];
  }
}

void check_reduce_scatter(Group& g) {
  const int n = g.size();
  const auto counts = uneven_counts(n, 5);
  std::vector<double> in(sum(counts));
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = element(g.rank(), i);
  std::vector<double> out(counts[at(g.rank())]);
  g.reduce_scatter(in, out, counts);
  std::size_t offset = 0;
  for (int r = 0; r < g.rank(); ++r) offset += counts[at(r)];
  for (std::size_t i = 0; i < out.size(); ++i) {
    double want = 0;
    for (int r = 0; r < n; ++r) want += element(r, offset + i);
    expect_eq(out[i], want, "reduce_scatter(sum)", g.rank(), i);
  }
  const std::vector<std::size_t> even(at(n), 4);
  std::vector<float> in_max(4 * at(n)), out_max(4);
  auto value = [](int r, std::size_t i) { return static_cast<float>((r * 37 + static_cast<int>(i) * 11) % 23); };
  for (std::size_t i = 0; i < in_max.size(); ++i) in_max[i] = value(g.rank(), i);
  g.reduce_scatter(in_max, out_max, even, ReduceOp::kMax);
  for (std::size_t i = 0; i < 4; ++i) {
    float want = -1;
    for (int r = 0; r < n; ++r) want = std::max(want, value(r, at(g.rank()) * 4 + i));
    expect_eq(out_max[i], want, "reduce_scatter(max)", g.rank(), i);
  }
}

void check_all_to_all_v(Group& g) {
  const int n = g.size(), me = g.rank();
  std::vector<std::size_t> send_counts, recv_counts;
  for (int r = 0; r < n; ++r) {
    send_counts.push_back(a2a_count(me, r));
    recv_counts.push_back(a2a_count(r, me));
  }
  std::vector<std::int64_t> in, out(sum(recv_counts));
  for (int r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < a2a_count(me, r); ++i) in.push_back(me * 10000 + r * 100 + static_cast<int>(i));
  }
  g.all_to_all_v(in, send_counts, out, recv_counts);
  std::size_t k = 0;
  for (int src = 0; src < n; ++src) {
    for (std::size_t i = 0; i < a2a_count(src, me); ++i, ++k) {
      expect_eq<std::int64_t>(out[k], src * 10000 + me * 100 + static_cast<int>(i), "all_to_all_v", me, k);
    }
  }
}

void check_broadcast(Group& g) {
  for (int root = 0; root < g.size(); ++root) {
    const float want = static_cast<float>(root) + 0.5f;
    std::vector<float> data(17, g.rank() == root ? want : -1.0f);
    g.broadcast(data, root);
    for (std::size_t i = 0; i < data.size(); ++i) expect_eq(data[i], want, "broadcast", g.rank(), i);
  }
}

void check_exchange_ring(Group& g) {
  const int n = g.size();
  if (n == 1) return;
  const int next = (g.rank() + 1) % n, prev = (g.rank() + n - 1) % n;
  std::vector<double> out(9, g.rank() + 0.25), in(9, 0);
  std::vector<double> out2(3, g.rank() * 2.0), in2(3, 0);
  g.exchange({P2POp::send(out, next, 7), P2POp::send(out2, next, 8), P2POp::recv(in2, prev, 8),
              P2POp::recv(in, prev, 7)});
  for (std::size_t i = 0; i < in.size(); ++i) expect_eq(in[i], prev + 0.25, "exchange(tag 7)", g.rank(), i);
  for (std::size_t i = 0; i < in2.size(); ++i) expect_eq(in2[i], prev * 2.0, "exchange(tag 8)", g.rank(), i);
}

void check_send_recv(Group& g) {
  const int n = g.size();
  if (g.rank() == 0) {
    for (int r = 1; r < n; ++r) {
      std::vector<std::int32_t> ask(4, r), answer(4, 0);
      g.send(ask, r, 1);
      g.recv(answer, r, 2);
      for (std::size_t i = 0; i < 4; ++i) expect_eq(answer[i], r * r, "send/recv", 0, i);
    }
  } else {
    std::vector<std::int32_t> ask(4, 0);
    g.recv(ask, 0, 1);
    for (auto& x : ask) x *= x;
    g.send(ask, 0, 2);
  }
}

void check_barrier(Group& g) {
  for (int i = 0; i < 3; ++i) g.barrier();
}

void check_every_collective(Group& g) {
  check_all_reduce(g, 1000);
  check_all_gather(g);
  check_all_gather_v(g);
  check_reduce_scatter(g);
  check_all_to_all_v(g);
  check_broadcast(g);
  check_exchange_ring(g);
  check_send_recv(g);
  check_barrier(g);
}

}  // namespace ntp::comm::testing
