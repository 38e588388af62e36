#pragma once
// `ntp launch --tee`: mirrors the workers' log files (logs/rank-N.log) to the
// launcher's output while they run, each line prefixed with its rank
// ("[rank 3] ..."), so a job can be watched without opening files. Lines
// are printed whole: a line still being written waits for its newline (or
// the end of the job).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace ntp::elastic {

class LogTee {
 public:
  LogTee(std::filesystem::path log_dir, std::vector<int> ranks, std::FILE* out);

  // Prints the complete lines appended since the last call.
  void poll();
  // poll(), then the unterminated rest of each log.
  void finish();

 private:
  struct Tail {
    std::uint64_t offset = 0;
    std::string partial;
  };
  void read_rank(int rank, Tail& tail);

  std::filesystem::path log_dir_;
  std::FILE* out_;
  std::map<int, Tail> tails_;
};

}  // namespace ntp::elastic
