// Failing this rank's own connections (comm/gloo_mesh.h fail_connections), as
// a group broken or aborted while another of its threads is in a call on it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "comm/gloo_mesh.h"
#include "tests/comm/thread_ranks.h"

namespace ntp::comm {
namespace {

using namespace std::chrono_literals;

// Rank 0 waits on an operation rank 1 never matches (a send it never
// receives, a receive it never sends to), with a 20 s deadline; 300 ms in,
// another thread of rank 0 closes rank 0's connections. The wait must end
// with an error at once. Seen to fail, each wait lasting its full 20 s, with
// gloo's closeConnections (a bare Pair::close) in place of fail_connections.
TEST(FailConnections, EndsThisRanksWaitsOnThePairsAtOnce) {
  for (bool send : {true, false}) {
    testing::TempStoreDir dir;
    std::atomic<bool> done{false};
    testing::rethrow_first(testing::run_threads(2, [&](int rank) {
      gloo::rendezvous::FileStore store(dir.path());
      auto context = std::make_shared<gloo::rendezvous::Context>(rank, 2);
      context->setTimeout(20s);
      gloo::transport::tcp::attr attr("127.0.0.1");
      auto device = gloo::transport::tcp::CreateDevice(attr);
      context->connectFullMesh(store, device);
      if (rank == 1) {
        while (!done) std::this_thread::sleep_for(1ms);  // keeps its side open, matching nothing
        return;
      }
      std::vector<float> data(1 << 20, 1.0f);
      auto buffer = context->createUnboundBuffer(data.data(), data.size() * sizeof(float));
      const std::uint64_t slot = 7;
      if (send) buffer->send(1, slot);
      else buffer->recv(1, slot);
      std::thread closer([&] {
        std::this_thread::sleep_for(300ms);
        fail_connections(*context);
      });
      const auto start = std::chrono::steady_clock::now();
      try {
        if (send) buffer->waitSend(20s);
        else buffer->waitRecv(20s);
        ADD_FAILURE() << (send ? "send" : "receive") << " completed with nobody on the other side";
      } catch (const gloo::IoException&) {
        // Failed, as it must be.
      }
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      closer.join();
      done = true;
      EXPECT_LT(waited, 2.0) << (send ? "send" : "receive") << " wait on a closed pair lasted " << waited << " s";
    }));
  }
}

}  // namespace
}  // namespace ntp::comm
