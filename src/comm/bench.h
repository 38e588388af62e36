#pragma once
// Communication benchmark in the style of nccl-tests, run by every rank of a
// group: for each size, one checked call (its wrong elements are counted),
// then a timed loop. Reported per size: time per call (max over ranks),
// algorithm bandwidth = bytes / time, and bus bandwidth = algbw x factor,
// where the factor makes the figure comparable with the link speed:
//   all_reduce 2(n-1)/n, all_gather / reduce_scatter / all_to_all (n-1)/n,
//   broadcast 1.
// Bytes are the per-rank buffer size (all_gather: the gathered output,
// reduce_scatter: the input), as in nccl-tests.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/group.h"

namespace ntp::comm {

struct CommBenchOptions {
  std::vector<std::string> ops = {"all_reduce"};  // or all_gather, reduce_scatter, all_to_all, broadcast
  std::size_t min_bytes = 1024;
  std::size_t max_bytes = 64u << 20;
  int iters = 0;   // timed calls per size; 0 = about 256 MiB of traffic, 5..200
  int warmup = 2;  // untimed calls per size
};

struct CommBenchRow {
  std::string op;
  std::size_t bytes = 0;
  std::size_t count = 0;  // float32 elements per rank buffer
  int iters = 0;
  double time_us = 0;
  double algbw_gbps = 0;
  double busbw_gbps = 0;
  std::int64_t wrong = 0;  // wrong elements over all ranks (must be 0)
};

// Names accepted in CommBenchOptions::ops.
const std::vector<std::string>& bench_ops();
double bus_factor(const std::string& op, int ranks);

// Throws CommError(kBadInput) for an unknown op or an empty size range.
void validate(const CommBenchOptions& opts);

// Collective: every rank of `group` calls it with the same options; every
// rank returns the same rows. Throws CommError(kBadInput) for an unknown op or
// a size range that is empty.
std::vector<CommBenchRow> run_comm_bench(Group& group, const CommBenchOptions& opts);

// nccl-tests-like text table (header lines start with '#').
std::string format_bench_table(const std::vector<CommBenchRow>& rows, const std::string& title);

}  // namespace ntp::comm

namespace ntp::comm {

// "4096", "1K", "64M", "1G", "64MiB" -> bytes (binary multiples). Throws
// CommError(kBadInput) naming `flag` for anything else.
std::size_t parse_bytes(const std::string& text, const std::string& flag);

}  // namespace ntp::comm
