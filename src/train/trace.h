#pragma once
// Chrome / Perfetto trace of a few steps: each rank is a process ("rank 5:
// replica 1 slot 1") with tracks compute, comm and reduce, so that a reader sees
// which communication backward hid and which the step waited on. Each worker
// writes its spans to trace/rank-N.json; merge_traces() joins them into
// trace.json (load it in ui.perfetto.dev or chrome://tracing).
//
// Timestamps are wall-clock microseconds since the run's start time, so spans
// of different processes on one host line up.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ntp::train {

// kReduce: the DP all-reduces of a pipelined sync, on the DP group's thread.
enum class Track { kCompute = 0, kComm = 1, kReduce = 2 };

struct TraceSpan {
  std::string name;   // "forward", "backward", "pre-sync b3", "all-reduce b3", "optimizer"
  Track track = Track::kCompute;
  double start_s = 0;  // unix time
  double dur_s = 0;
  std::int64_t step = 0;
};

class TraceRecorder {
 public:
  TraceRecorder(int rank, std::string label, double run_start_s)
      : rank_(rank), label_(std::move(label)), run_start_s_(run_start_s) {}

  // Not thread-safe: the compute and the comm thread each keep a recorder,
  // joined with append() before writing.
  void add(TraceSpan span) { spans_.push_back(std::move(span)); }
  void append(const TraceRecorder& other);
  const std::vector<TraceSpan>& spans() const { return spans_; }

  // The Chrome trace events of this rank (metadata + one "X" event per span).
  nlohmann::json events() const;
  void write(const std::filesystem::path& path) const;

 private:
  int rank_;
  std::string label_;
  double run_start_s_;
  std::vector<TraceSpan> spans_;
};

// Joins every trace/rank-*.json of a run into {"traceEvents": [...]}; returns
// the number of ranks merged.
int merge_traces(const std::filesystem::path& fragment_dir, const std::filesystem::path& out);

}  // namespace ntp::train
