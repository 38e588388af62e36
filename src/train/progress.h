#pragma once
// The progress display of a run: on a terminal one line rewritten in place,
// otherwise one plain line per update (logs and pipes stay readable).
#include <cstdint>
#include <cstdio>
#include <string>

#include "train/metrics.h"

namespace ntp::train {

class Progress {
 public:
  // live = true rewrites one line (for a TTY); false prints a line per update.
  Progress(std::FILE* out, std::int64_t total_steps, bool live);

  void update(const StepMetrics& m, double elapsed_s);
  // Ends the live line (so the next output starts on a fresh line).
  void finish();

 private:
  std::FILE* out_;
  std::int64_t total_steps_;
  bool live_;
  bool open_line_ = false;
};

}  // namespace ntp::train
