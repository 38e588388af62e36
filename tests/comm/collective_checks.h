#pragma once
// Collective checks shared by the thread tests and the process helper: each
// runs one collective on `g` and compares the result with a reference
// computed locally; a wrong element throws std::runtime_error naming it.
#include "comm/group.h"

namespace ntp::comm::testing {

void check_all_reduce(Group& g, std::size_t count);  // sum and max, fp32 and fp64
void check_all_gather(Group& g);
void check_all_gather_v(Group& g);      // uneven counts, one of them zero
void check_reduce_scatter(Group& g);    // uneven counts, sum; even counts, max
void check_all_to_all_v(Group& g);      // uneven in both directions
void check_broadcast(Group& g);         // from every root
void check_exchange_ring(Group& g);     // two tags, posted in opposite orders
void check_send_recv(Group& g);         // blocking pairs through rank 0
void check_barrier(Group& g);

// All of the above, in one order (every rank must call it).
void check_every_collective(Group& g);

}  // namespace ntp::comm::testing
