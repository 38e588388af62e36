#include "elastic/log_tee.h"

#include <fstream>

#include <fmt/format.h>

namespace ntp::elastic {

LogTee::LogTee(std::filesystem::path log_dir, std::vector<int> ranks, std::FILE* out)
    : log_dir_(std::move(log_dir)), out_(out) {
  for (int rank : ranks) tails_[rank] = {};
}

void LogTee::read_rank(int rank, Tail& tail) {
  std::ifstream in(log_dir_ / fmt::format("rank-{}.log", rank), std::ios::binary);
  if (!in) return;  // not created yet
  in.seekg(0, std::ios::end);
  const auto size = static_cast<std::uint64_t>(in.tellg());
  if (size < tail.offset) tail.offset = 0;  // truncated: a fresh worker's log
  if (size == tail.offset) return;
  in.seekg(static_cast<std::streamoff>(tail.offset));
  std::string bytes(size - tail.offset, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  tail.offset = size;
  tail.partial += bytes;
  std::size_t start = 0;
  for (std::size_t end; (end = tail.partial.find('\n', start)) != std::string::npos; start = end + 1) {
    std::fprintf(out_, "[rank %d] %.*s\n", rank, static_cast<int>(end - start), tail.partial.data() + start);
  }
  tail.partial.erase(0, start);
}

void LogTee::poll() {
  for (auto& [rank, tail] : tails_) read_rank(rank, tail);
  std::fflush(out_);
}

void LogTee::finish() {
  poll();
  for (auto& [rank, tail] : tails_) {
    if (tail.partial.empty()) continue;
    std::fprintf(out_, "[rank %d] %s\n", rank, tail.partial.c_str());
    tail.partial.clear();
  }
  std::fflush(out_);
}

}  // namespace ntp::elastic
