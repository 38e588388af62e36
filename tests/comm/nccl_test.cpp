// NCCL backend: collectives on device buffers against a host reference,
// deadline -> abort -> kTimeout, and re-initialization in the next epoch.
// Skipped (reported as skipped, not passed) in a build without CUDA or on a
// machine without a GPU; multi-rank cases need one GPU per rank.
#include <gtest/gtest.h>

#include <thread>

#include "comm/nccl_group.h"
#include "tests/comm/thread_ranks.h"

namespace ntp::comm {
namespace {

using namespace std::chrono_literals;

// Why a test that needs `n` GPUs cannot run here ("" if it can).
std::string missing_gpus(int n) {
  if (!have_nccl()) return "built without CUDA/NCCL";
  const int devices = cuda_device_count();
  if (devices == 0) return "cudaGetDeviceCount reports no device";
  if (devices < n) return "needs " + std::to_string(n) + " GPUs, " + std::to_string(devices) + " visible";
  return "";
}

// GTEST_SKIP must run in the test body itself to end the test.
#define NTP_REQUIRE_GPUS(n)                                 \
  do {                                                      \
    const std::string why_skipped = missing_gpus(n);        \
    if (!why_skipped.empty()) GTEST_SKIP() << why_skipped;  \
  } while (0)

// Host vector <-> device buffer of one rank.
template <class T>
class DeviceVector {
 public:
  DeviceVector(const std::vector<T>& host, int device) : n_(host.size()), ptr_(device_alloc(n_ * sizeof(T), device)) {
    if (n_ > 0) copy_to_device(ptr_, host.data(), n_ * sizeof(T));
  }
  DeviceVector(std::size_t n, int device) : DeviceVector(std::vector<T>(n, T{}), device) {}
  ~DeviceVector() { device_free(ptr_); }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;
  View view() { return View(static_cast<T*>(ptr_), n_); }
  std::vector<T> host() const {
    std::vector<T> out(n_);
    if (n_ > 0) copy_to_host(out.data(), ptr_, n_ * sizeof(T));
    return out;
  }

 private:
  std::size_t n_;
  void* ptr_;
};

GroupOptions nccl_options(int size, int rank, const std::string& name, std::uint64_t epoch = 1) {
  auto opts = testing::group_options(size, rank, name, epoch, 20000ms);
  opts.backend = Backend::kNccl;
  opts.device = rank;
  return opts;
}

void run_nccl_group(int size, const std::string& name, const std::function<void(Group&)>& body) {
  testing::TempStoreDir dir;
  auto store = open_store(dir.spec());
  testing::rethrow_first(testing::run_threads(size, [&](int rank) {
    auto g = create_group(store, nccl_options(size, rank, name));
    body(*g);
  }));
}

void check_collectives(Group& g) {
  const int n = g.size(), me = g.rank(), device = me;
  DeviceVector<float> x(std::vector<float>(1000, static_cast<float>(me + 1)), device);
  g.all_reduce(static_cast<float*>(x.view().data), 1000);
  for (float v : x.host()) ASSERT_EQ(v, static_cast<float>(n * (n + 1) / 2));

  DeviceVector<double> part(std::vector<double>(3, me * 10.0), device), all(3 * static_cast<std::size_t>(n), device);
  g.all_gather(part.view(), all.view());
  const auto gathered = all.host();
  for (int r = 0; r < n; ++r) ASSERT_EQ(gathered[static_cast<std::size_t>(r) * 3], r * 10.0);

  std::vector<std::size_t> counts;
  for (int r = 0; r < n; ++r) counts.push_back(static_cast<std::size_t>(r + 1));
  std::vector<double> in_host;
  for (int r = 0; r < n; ++r)
    for (int i = 0; i <= r; ++i) in_host.push_back(me + r * 100.0);
  DeviceVector<double> in(in_host, device), out(static_cast<std::size_t>(me + 1), device);
  g.reduce_scatter(in.view(), out.view(), counts);
  for (double v : out.host()) ASSERT_EQ(v, n * (n - 1) / 2.0 + n * me * 100.0);

  DeviceVector<float> b(std::vector<float>(5, me == 0 ? 7.0f : 0.0f), device);
  g.broadcast(b.view(), 0);
  for (float v : b.host()) ASSERT_EQ(v, 7.0f);
  g.barrier();
  auto w = g.all_reduce_async(static_cast<float*>(x.view().data), 1000, ReduceOp::kMax);
  w->wait();
}

TEST(Nccl, CollectivesOnOneGpu) {
  NTP_REQUIRE_GPUS(1);
  run_nccl_group(1, "nccl1", check_collectives);
}

TEST(Nccl, CollectivesOnEveryGpu) {
  NTP_REQUIRE_GPUS(2);
  run_nccl_group(std::min(cuda_device_count(), 8), "nccl-all", check_collectives);
}

TEST(Nccl, DeadlineAbortsAndNextEpochReinitializes) {
  NTP_REQUIRE_GPUS(2);
  testing::TempStoreDir dir;
  auto store = open_store(dir.spec());
  testing::rethrow_first(testing::run_threads(2, [&](int rank) {
    {
      auto opts = nccl_options(2, rank, "watchdog", 1);
      opts.timeout = 1000ms;
      auto g = create_group(store, opts);
      DeviceVector<float> x(std::vector<float>(16, 1.0f), rank);
      if (rank == 0) {
        const auto start = std::chrono::steady_clock::now();
        try {
          g->all_reduce(static_cast<float*>(x.view().data), 16);  // rank 1 never joins this call
          ADD_FAILURE() << "all_reduce without a peer succeeded";
        } catch (const CommError& e) {
          EXPECT_EQ(e.kind(), CommErrorKind::kTimeout) << e.what();
          EXPECT_LT(std::chrono::steady_clock::now() - start, 2000ms);
          EXPECT_TRUE(g->broken());
        }
      } else {
        std::this_thread::sleep_for(1500ms);
      }
    }
    auto g2 = create_group(store, nccl_options(2, rank, "watchdog", 2));
    DeviceVector<float> y(std::vector<float>(16, 1.0f), rank);
    g2->all_reduce(static_cast<float*>(y.view().data), 16);
    EXPECT_EQ(y.host()[0], 2.0f);
  }));
}

TEST(Nccl, WatchdogAbortBreaksTheGroup) {
  NTP_REQUIRE_GPUS(1);
  run_nccl_group(1, "nccl-abort", [](Group& g) {
    DeviceVector<float> x(std::vector<float>(8, 1.0f), 0);
    g.all_reduce(static_cast<float*>(x.view().data), 8);
    g.abort("test watchdog");
    EXPECT_TRUE(g.broken());
    try {
      g.all_reduce(static_cast<float*>(x.view().data), 8);
      ADD_FAILURE() << "aborted group still ran";
    } catch (const CommError& e) {
      EXPECT_EQ(e.kind(), CommErrorKind::kBroken);
    }
  });
}

TEST(Nccl, MissingPeerTimesOutAtCreation) {
  NTP_REQUIRE_GPUS(1);
  testing::TempStoreDir dir;
  auto opts = nccl_options(2, 0, "lonely");
  opts.connect_timeout = 500ms;
  try {
    create_group(open_store(dir.spec()), opts);
    ADD_FAILURE() << "created a group without its second rank";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), CommErrorKind::kTimeout);
    EXPECT_EQ(e.peer(), 1);
  }
}

}  // namespace
}  // namespace ntp::comm
