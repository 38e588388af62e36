#include "comm/bench.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace ntp::comm {

const std::vector<std::string>& bench_ops() {
  static const std::vector<std::string> ops = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                               "broadcast"};
  return ops;
}

double bus_factor(const std::string& op, int ranks) {
  const double n = ranks;
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "broadcast") return 1.0;
  return (n - 1) / n;
}

namespace {

// One benchmarked operation on float buffers sized for `count` elements.
class BenchCall {
 public:
  BenchCall(Group& g, std::string op, std::size_t count) : g_(g), op_(std::move(op)), count_(count) {
    const auto n = static_cast<std::size_t>(g.size());
    block_ = count / n;
    in_.assign(op_ == "all_gather" ? block_ : count_, 0.0f);
    out_.assign(op_ == "reduce_scatter" ? block_ : count_, 0.0f);
  }

  void run() {
    const auto n = static_cast<std::size_t>(g_.size());
    if (op_ == "all_reduce") {
      g_.all_reduce(in_.data(), in_.size());
    } else if (op_ == "all_gather") {
      g_.all_gather(in_, out_);
    } else if (op_ == "reduce_scatter") {
      g_.reduce_scatter(in_, out_, std::vector<std::size_t>(n, block_));
    } else if (op_ == "all_to_all") {
      const std::vector<std::size_t> counts(n, block_);
      g_.all_to_all_v(in_, counts, out_, counts);
    } else {
      g_.broadcast(in_, 0);
    }
  }

  // Fills inputs with a rank pattern, runs once, and counts wrong elements.
  std::int64_t run_checked() {
    const int me = g_.rank();
    auto value = [](int rank, std::size_t i) { return static_cast<float>(rank + 1) + static_cast<float>(i % 13); };
    for (std::size_t i = 0; i < in_.size(); ++i) in_[i] = value(me, i);
    run();
    std::int64_t wrong = 0;
    const int n = g_.size();
    if (op_ == "all_reduce") {
      for (std::size_t i = 0; i < in_.size(); ++i) {
        float want = 0;
        for (int r = 0; r < n; ++r) want += value(r, i);
        wrong += in_[i] != want;
      }
    } else if (op_ == "all_gather") {
      for (std::size_t i = 0; i < out_.size(); ++i) wrong += out_[i] != value(static_cast<int>(i / block_), i % block_);
    } else if (op_ == "reduce_scatter") {
      for (std::size_t i = 0; i < out_.size(); ++i) {
        float want = 0;
        for (int r = 0; r < n; ++r) want += value(r, static_cast<std::size_t>(me) * block_ + i);
        wrong += out_[i] != want;
      }
    } else if (op_ == "all_to_all") {
      for (std::size_t i = 0; i < out_.size(); ++i) {
        const int src = static_cast<int>(i / block_);
        wrong += out_[i] != value(src, static_cast<std::size_t>(me) * block_ + i % block_);
      }
    } else {
      for (std::size_t i = 0; i < in_.size(); ++i) wrong += in_[i] != value(0, i);
    }
    std::fill(in_.begin(), in_.end(), 0.0f);  // timed calls reduce zeros: no overflow
    return wrong;
  }

 private:
  Group& g_;
  std::string op_;
  std::size_t count_;
  std::size_t block_ = 0;
  std::vector<float> in_, out_;
};

int iterations_for(std::size_t bytes, const CommBenchOptions& opts) {
  if (opts.iters > 0) return opts.iters;
  const double target = 256.0 * 1024 * 1024;
  return static_cast<int>(std::clamp(target / static_cast<double>(std::max<std::size_t>(bytes, 1)), 5.0, 200.0));
}

CommBenchRow bench_one(Group& g, const std::string& op, std::size_t bytes, const CommBenchOptions& opts) {
  const auto n = static_cast<std::size_t>(g.size());
  std::size_t count = bytes / sizeof(float);
  if (op != "all_reduce" && op != "broadcast") count = std::max(n, count / n * n);  // whole blocks per rank
  count = std::max<std::size_t>(count, 1);
  BenchCall call(g, op, count);
  CommBenchRow row;
  row.op = op;
  row.count = count;
  row.bytes = count * sizeof(float);
  row.iters = iterations_for(row.bytes, opts);
  double wrong = static_cast<double>(call.run_checked());
  for (int i = 0; i < opts.warmup; ++i) call.run();
  g.barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < row.iters; ++i) call.run();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / row.iters;
  g.all_reduce(&seconds, 1, ReduceOp::kMax);  // the slowest rank sets the pace
  g.all_reduce(&wrong, 1, ReduceOp::kSum);
  row.time_us = seconds * 1e6;
  row.algbw_gbps = static_cast<double>(row.bytes) / seconds / 1e9;
  row.busbw_gbps = row.algbw_gbps * bus_factor(op, g.size());
  row.wrong = static_cast<std::int64_t>(wrong);
  return row;
}

}  // namespace

void validate(const CommBenchOptions& opts) {
  if (opts.ops.empty()) throw_bad_input("--op", "no operation given");
  for (const auto& op : opts.ops) {
    if (std::find(bench_ops().begin(), bench_ops().end(), op) == bench_ops().end()) {
      throw_bad_input("--op", "unknown operation '" + op + "' (all_reduce, all_gather, reduce_scatter, all_to_all, broadcast)");
    }
  }
  if (opts.min_bytes == 0 || opts.min_bytes > opts.max_bytes) {
    throw_bad_input("--min-bytes/--max-bytes", "size range " + std::to_string(opts.min_bytes) + ".." +
                                                   std::to_string(opts.max_bytes) + " bytes is empty");
  }
}

std::vector<CommBenchRow> run_comm_bench(Group& group, const CommBenchOptions& opts) {
  validate(opts);
  std::vector<CommBenchRow> rows;
  for (const auto& op : opts.ops) {
    for (std::size_t bytes = opts.min_bytes; bytes <= opts.max_bytes; bytes *= 2) {
      rows.push_back(bench_one(group, op, bytes, opts));
    }
  }
  return rows;
}

std::string format_bench_table(const std::vector<CommBenchRow>& rows, const std::string& title) {
  std::ostringstream out;
  out << "# " << title << "\n";
  char line[256];
  std::snprintf(line, sizeof(line), "# %-14s %12s %10s %6s %11s %11s %11s %7s\n", "op", "size(B)", "count", "iters",
                "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  out << line;
  std::int64_t wrong = 0;
  double bus_sum = 0;
  for (const auto& r : rows) {
    std::snprintf(line, sizeof(line), "  %-14s %12zu %10zu %6d %11.1f %11.3f %11.3f %7lld\n", r.op.c_str(), r.bytes,
                  r.count, r.iters, r.time_us, r.algbw_gbps, r.busbw_gbps, static_cast<long long>(r.wrong));
    out << line;
    wrong += r.wrong;
    bus_sum += r.busbw_gbps;
  }
  out << "# wrong results: " << wrong << (wrong == 0 ? " (OK)" : " (FAILED)") << "\n";
  if (!rows.empty()) out << "# avg bus bandwidth: " << bus_sum / static_cast<double>(rows.size()) << " GB/s\n";
  return out.str();
}

}  // namespace ntp::comm

namespace ntp::comm {

std::size_t parse_bytes(const std::string& text, const std::string& flag) {
  std::size_t used = 0;
  unsigned long long value = 0;
  try {
    value = std::stoull(text, &used);
  } catch (const std::exception&) {
    throw_bad_input(flag, "'" + text + "' is not a size (e.g. 1024, 1K, 64M)");
  }
  std::string unit = text.substr(used);
  if (unit.size() > 1 && (unit.substr(1) == "iB" || unit.substr(1) == "B")) unit = unit.substr(0, 1);
  std::size_t scale = 1;
  if (unit == "K" || unit == "k") {
    scale = 1024;
  } else if (unit == "M" || unit == "m") {
    scale = 1024 * 1024;
  } else if (unit == "G" || unit == "g") {
    scale = 1024ull * 1024 * 1024;
  } else if (!unit.empty() && unit != "B") {
    throw_bad_input(flag, "'" + text + "' has an unknown unit (use K, M or G)");
  }
  return static_cast<std::size_t>(value) * scale;
}

}  // namespace ntp::comm
