#pragma once
// Deliberate bugs, one at a time, that the checkers must catch (their own
// tests: a checker never shown to fail proves nothing). Each is switched on
// by test.mutation, which the configuration refuses unless the environment
// has NTP_TEST_MUTATIONS=1, so no real run can carry one.
//
//   ln_frozen            h0.ln1_w is never updated (AdamW skips it)
//   update_x1.01         every update is 1 % too large (lr x 1.01)
//   update_x1.03         every update is 3 % too large: what --verify must
//                        still catch in a bf16 run (docs/train.md)
//   local_loss_scale     the loss is scaled by the replica's tokens, not the
//                        global batch's (DESIGN §9's pitfall)
//   sample_twice         at step 1, replica 0 trains its first sample twice
//                        instead of its second one
//   sample_skipped       at step 1, replica 0 leaves its last sample out
//   replicated_unsynced  the rank keeps its own replicated gradients instead
//                        of the synced ones (an extra slot left out of the sync)
//   unit_drift           at the end, the rank's copy of its first unit is one
//                        ulp off (only a cross-replica hash can see it)
//   skip_roll_forward    a stale rank (a repaired one rejoining, or one in an
//                        older layout) keeps its outdated units instead of
//                        receiving them (the recovery proof must stop it)
//   tied_unsummed        with pipeline stages, the rank leaves out the sum of
//                        the tied wte's two copies (each stage keeps its own
//                        part of the gradient)
//   stale_activation     with pipeline stages, the rank's stage runs each
//                        micro-batch after the first on the previous one's
//                        activation (what a message taken for the wrong
//                        micro-batch would do)
#include <string>

namespace ntp::train {

enum class Mutation {
  kNone,
  kLnFrozen,
  kUpdateScaled,
  kUpdateScaled3,
  kLocalLossScale,
  kSampleTwice,
  kSampleSkipped,
  kReplicatedUnsynced,
  kUnitDrift,
  kSkipRollForward,
  kTiedUnsummed,
  kStaleActivation,
};

// kNone for "" and for an unknown name.
Mutation parse_mutation(const std::string& name);
std::string mutation_list();

}  // namespace ntp::train
