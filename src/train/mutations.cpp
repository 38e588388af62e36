#include "train/mutations.h"

#include <array>
#include <utility>

namespace ntp::train {
namespace {

constexpr std::array<std::pair<const char*, Mutation>, 11> kNames = {{
    {"ln_frozen", Mutation::kLnFrozen},
    {"update_x1.01", Mutation::kUpdateScaled},
    {"update_x1.03", Mutation::kUpdateScaled3},
    {"local_loss_scale", Mutation::kLocalLossScale},
    {"sample_twice", Mutation::kSampleTwice},
    {"sample_skipped", Mutation::kSampleSkipped},
    {"replicated_unsynced", Mutation::kReplicatedUnsynced},
    {"unit_drift", Mutation::kUnitDrift},
    {"skip_roll_forward", Mutation::kSkipRollForward},
    {"tied_unsummed", Mutation::kTiedUnsummed},
    {"stale_activation", Mutation::kStaleActivation},
}};

}  // namespace

Mutation parse_mutation(const std::string& name) {
  for (const auto& [text, m] : kNames) {
    if (name == text) return m;
  }
  return Mutation::kNone;
}

std::string mutation_list() {
  std::string out;
  for (const auto& [text, m] : kNames) out += (out.empty() ? "" : " | ") + std::string(text);
  return out;
}

}  // namespace ntp::train
