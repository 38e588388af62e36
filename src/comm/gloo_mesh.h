#pragma once
// The TCP mesh of a Gloo group: failing every pair at once on abort, which
// Gloo has no public call for.
#include <string>

namespace gloo {
class Context;
}  // namespace gloo

namespace ntp::comm {

// Fails every connection of `context` now; safe from any thread while
// another thread is blocked in a gloo call on it. Pending sends and receives
// wake with an error and the sockets close, so peers waiting on this rank see
// the close. For a context that no earlier failure closed.
void fail_connections(gloo::Context& context);

}  // namespace ntp::comm
