#include "train/trace.h"

#include <algorithm>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

#include "train/run_dir.h"

namespace ntp::train {
namespace {

nlohmann::json metadata(const char* kind, int pid, int tid, const std::string& name) {
  return {{"ph", "M"}, {"name", kind}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}};
}

}  // namespace

void TraceRecorder::append(const TraceRecorder& other) {
  spans_.insert(spans_.end(), other.spans_.begin(), other.spans_.end());
}

nlohmann::json TraceRecorder::events() const {
  nlohmann::json out = nlohmann::json::array();
  out.push_back(metadata("process_name", rank_, 0, label_));
  out.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", rank_}, {"args", {{"sort_index", rank_}}}});
  out.push_back(metadata("thread_name", rank_, static_cast<int>(Track::kCompute), "compute"));
  out.push_back(metadata("thread_name", rank_, static_cast<int>(Track::kComm), "comm"));
  out.push_back(metadata("thread_name", rank_, static_cast<int>(Track::kReduce), "reduce"));
  for (const TraceSpan& span : spans_) {
    out.push_back({{"name", span.name},
                   {"cat", span.track == Track::kCompute ? "compute" : "comm"},
                   {"ph", "X"},
                   {"ts", (span.start_s - run_start_s_) * 1e6},
                   {"dur", span.dur_s * 1e6},
                   {"pid", rank_},
                   {"tid", static_cast<int>(span.track)},
                   {"args", {{"step", span.step}}}});
  }
  return out;
}

void TraceRecorder::write(const std::filesystem::path& path) const {
  std::filesystem::create_directories(path.parent_path());
  write_file_atomic(path, events().dump() + "\n");
}

int merge_traces(const std::filesystem::path& fragment_dir, const std::filesystem::path& out) {
  std::vector<std::filesystem::path> files;
  if (std::filesystem::is_directory(fragment_dir)) {
    for (const auto& entry : std::filesystem::directory_iterator(fragment_dir)) {
      if (entry.path().extension() == ".json") files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  nlohmann::json events = nlohmann::json::array();
  for (const auto& file : files) {
    std::ifstream in(file);
    nlohmann::json fragment;
    try {
      in >> fragment;
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error(fmt::format("{}: {}", file.string(), e.what()));
    }
    for (auto& event : fragment) events.push_back(std::move(event));
  }
  write_file_atomic(out, nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() + "\n");
  return static_cast<int>(files.size());
}

}  // namespace ntp::train
