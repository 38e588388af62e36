#include "train/progress.h"

namespace ntp::train {

Progress::Progress(std::FILE* out, std::int64_t total_steps, bool live)
    : out_(out), total_steps_(total_steps), live_(live) {}

void Progress::update(const StepMetrics& m, double elapsed_s) {
  const std::string line = progress_line(m, total_steps_, elapsed_s);
  if (live_) {
    // Carriage return + erase line: the line is redrawn in place.
    std::fprintf(out_, "\r\033[K%s", line.c_str());
    open_line_ = true;
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

void Progress::finish() {
  if (open_line_) std::fprintf(out_, "\n");
  open_line_ = false;
  std::fflush(out_);
}

}  // namespace ntp::train
