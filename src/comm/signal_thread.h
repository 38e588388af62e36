#pragma once

// Asynchronous signals (SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2) go to one
// thread of their own. Every other thread of the process blocks them, so a
// handler never interrupts a compute thread: a signal handler run on a
// thread inside oneDNN's sgemm was seen to corrupt the heap ("corrupted size
// vs. prev_size"), even a handler that does nothing. Handlers installed with
// sigaction work as before; they run on that thread, never on the others.

#include <signal.h>

namespace ntp::comm {

// Blocks the routed signals in the calling thread and starts the thread that
// takes them. Threads started afterwards inherit the block; threads started
// before do not, so call it first thing in main(). Idempotent.
void route_signals_to_one_thread();

// The signals routed (for tests and for children, which unblock them).
sigset_t routed_signals();

// SIGPIPE ignored (unless a handler is installed), so that a write to a
// closed pipe or socket is an EPIPE error instead of death: a peer gone
// mid-write (Gloo) or a reader of stdout gone (`ntp train | head`, a log
// collector that died) must not take a training job down with it.
// Idempotent.
void ignore_sigpipe();

// For a forked child before exec: the program started gets the mask and the
// SIGPIPE disposition it expects (nothing blocked, the default action).
// Async-signal-safe.
void unblock_signals_in_child();

}  // namespace ntp::comm
