#include "train/step_hooks.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

#include <fmt/format.h>

namespace ntp::train {
namespace {

// The value of `name` when NTP_TEST_MUTATIONS=1 allows it, else nullptr.
const char* test_env(const char* name) {
  const char* allowed = std::getenv("NTP_TEST_MUTATIONS");
  if (allowed == nullptr || std::string(allowed) != "1") return nullptr;
  return std::getenv(name);
}

}  // namespace

const char* to_string(StepPhase phase) {
  switch (phase) {
    case StepPhase::kStart:
      return "start";
    case StepPhase::kForward:
      return "forward";
    case StepPhase::kBackward:
      return "backward";
    case StepPhase::kSync:
      return "sync";
    case StepPhase::kCommit:
      return "commit";
    case StepPhase::kOptimizer:
      return "optimizer";
    case StepPhase::kValidation:
      return "validation";
    case StepPhase::kCheckpoint:
      return "checkpoint";
  }
  return "?";
}

StepHooks::StepHooks(const TestConfig& test, int rank, int mispair_rank) : mispairs_(mispair_rank == rank) {
  if (test.mutation_rank < 0 || test.mutation_rank == rank) mutation_ = parse_mutation(test.mutation);
  if (const char* spec = test_env("NTP_TEST_SLOW_COMPUTE")) {
    double seconds = 0.0;
    int slow_rank = -1;
    double factor = 1.0;
    if (std::sscanf(spec, "%lf:%d:%lf", &seconds, &slow_rank, &factor) != 3) {
      throw std::invalid_argument(
          fmt::format("NTP_TEST_SLOW_COMPUTE = \"{}\": expected SECONDS:RANK:FACTOR", spec));
    }
    slow_compute_s_per_sample_ = slow_rank == rank ? seconds * factor : seconds;
  }
  if (const char* spec = test_env("NTP_TEST_SLOW_UPDATE")) {
    int slow_rank = -1;
    double seconds = 0.0;
    if (std::sscanf(spec, "%d:%lf", &slow_rank, &seconds) != 2) {
      throw std::invalid_argument(fmt::format("NTP_TEST_SLOW_UPDATE = \"{}\": expected RANK:SECONDS", spec));
    }
    slow_update_s_ = slow_rank == rank ? seconds : 0.0;
  }
}

void StepHooks::mutate_samples(std::int64_t step, int replica, std::vector<std::int64_t>& samples) const {
  if (step != 1 || replica != 0 || samples.size() < 2) return;
  if (mutation_ == Mutation::kSampleTwice) samples[1] = samples[0];
  if (mutation_ == Mutation::kSampleSkipped) samples.pop_back();
}

double StepHooks::compute_delay_s(std::int64_t samples, double speedup) const {
  if (slow_compute_s_per_sample_ <= 0) return 0.0;
  return static_cast<double>(samples) * slow_compute_s_per_sample_ / speedup;
}

void StepHooks::sleep_s(double seconds) { std::this_thread::sleep_for(std::chrono::duration<double>(seconds)); }

}  // namespace ntp::train
