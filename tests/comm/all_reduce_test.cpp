// All-reduce over Gloo/TCP with ranks as threads: sum and max, fp32 and fp64,
// group sizes 1..8, compared with a reference computed locally.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/comm/thread_ranks.h"

namespace ntp::comm {
namespace {

using testing::run_group;

// Distinct, exactly representable values per (rank, index) so sums are exact.
template <class T>
T value(int rank, std::size_t i) {
  return static_cast<T>((static_cast<int>(i % 97) - 48) * 0.25 + rank * 3.0);
}

template <class T>
void check_all_reduce(int size, std::size_t count, ReduceOp op) {
  run_group(size, "ar", [&](Group& g) {
    std::vector<T> data(count);
    for (std::size_t i = 0; i < count; ++i) data[i] = value<T>(g.rank(), i);
    g.all_reduce(data.data(), count, op);
    for (std::size_t i = 0; i < count; ++i) {
      T expected = value<T>(0, i);
      for (int r = 1; r < size; ++r) {
        expected = op == ReduceOp::kSum ? expected + value<T>(r, i) : std::max(expected, value<T>(r, i));
      }
      ASSERT_EQ(data[i], expected) << "rank " << g.rank() << " index " << i;
    }
  });
}

class AllReduceSizes : public ::testing::TestWithParam<int> {};

TEST_P(AllReduceSizes, SumFloat) { check_all_reduce<float>(GetParam(), 1000, ReduceOp::kSum); }
TEST_P(AllReduceSizes, MaxFloat) { check_all_reduce<float>(GetParam(), 1000, ReduceOp::kMax); }
TEST_P(AllReduceSizes, SumDouble) { check_all_reduce<double>(GetParam(), 1000, ReduceOp::kSum); }
TEST_P(AllReduceSizes, MaxDouble) { check_all_reduce<double>(GetParam(), 1000, ReduceOp::kMax); }

INSTANTIATE_TEST_SUITE_P(GroupSize, AllReduceSizes, ::testing::Range(1, 9));

TEST(AllReduce, LargeBufferSpansManySegments) { check_all_reduce<float>(4, 3 * 1024 * 1024 + 17, ReduceOp::kSum); }

TEST(AllReduce, EmptyAndOneElement) {
  check_all_reduce<float>(3, 0, ReduceOp::kSum);
  check_all_reduce<double>(3, 1, ReduceOp::kMax);
}

TEST(AllReduce, RepeatedCallsKeepOrder) {
  run_group(4, "repeat", [](Group& g) {
    for (int step = 0; step < 50; ++step) {
      std::vector<float> data(33, static_cast<float>(g.rank() + step));
      g.all_reduce(data.data(), data.size());
      ASSERT_EQ(data[0], static_cast<float>(0 + 1 + 2 + 3 + 4 * step));
    }
  });
}

}  // namespace
}  // namespace ntp::comm
