#pragma once
// A Gloo TCP transport context whose waits also end when a pair fails.
//
// Gloo's TCP pair wakes the buffers with a pending operation when its peer
// closes the connection or the context is aborted, but not the buffer whose
// message is half received (the pair holds it in its read state, no longer in
// its pending list) nor an unbound send queued for the socket. A rank whose
// peer dies in the middle of a message therefore waits out the call's whole
// deadline: measured, a receiver of a 64 MiB point-to-point message whose
// sender was SIGKILLed waited the full 15 s deadline in 5 runs of 6, and in
// a dp 2 x tp 32 job a healthy rank sat 120 s in a TP all-reduce after all
// its peers had closed their connections.
//
// Every unbound buffer of a watched context waits in slices: a process-wide
// ticker interrupts a wait that has lasted kWaitCheck, and again every
// kWaitCheck (Gloo's abortWaitRecv and abortWaitSend), and the buffer then
// asks the context whether the pair of a peer it still has operations
// outstanding with (in the direction it waits for) has failed; if one has,
// the wait throws that pair's error, as Gloo does for a pending operation.
// Other pairs do not count: a peer that finished its part and closed is how
// every group ends. The context learns of a failed pair through its sentinel:
// a receive pending on that pair, on a slot nobody sends on, which Gloo wakes
// with the pair's error. The call's deadline is kept exactly: the last slice
// is a plain Gloo wait with the time left.
#include <chrono>
#include <memory>
#include <vector>

namespace gloo::transport {
class Context;
class Device;
}  // namespace gloo::transport

namespace ntp::comm {

// How often a waiting buffer looks at its pairs.
inline constexpr std::chrono::milliseconds kWaitCheck{200};

// A transport context of `device` for `rank` of `size`, its pairs and waits
// bounded by `timeout`.
std::shared_ptr<gloo::transport::Context> create_watched_context(
    const std::shared_ptr<gloo::transport::Device>& device, int rank, int size, std::chrono::milliseconds timeout);

// Once the pairs with `peers` are connected: posts the sentinel's receives.
// Without it (or for a context not made above) waits are not watched.
void arm_watched_context(gloo::transport::Context& context, const std::vector<int>& peers);

}  // namespace ntp::comm
