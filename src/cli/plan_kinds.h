#pragma once
// `ntp plan --model`: for every unit kind of a model, the width each slot
// holds, and per phase of the TP step the busiest slot's work over the ideal,
// for today's cut (align 1, unit counts) and the configured one (docs/plan.md).
#include <nlohmann/json.hpp>
#include <string>

#include "layout/failed_slots.h"
#include "layout/slot_speeds.h"
#include "layout/unit_costs.h"

namespace ntp::cli {

struct KindsRequest {
  layout::ModelShape shape;
  int tp = 1;
  int replicas = 1;
  int min_tp = 1;
  layout::FailedSlots failed;
  layout::SlotSpeeds speeds;  // the slots' real speeds: every cut is timed at them
  layout::Unit align = 64;    // the configured cut: neuron-like kinds in these blocks
  bool by_work = true;        // the configured cut follows speeds (parallel.balance = "work")
};

// Both throw std::invalid_argument naming the kind when a kind cannot be laid
// out (fewer units than the active slots of a training replica) and
// layout::InfeasibleError when no replica trains.
nlohmann::ordered_json kinds_json(const KindsRequest& request);
std::string kinds_table(const KindsRequest& request);

}  // namespace ntp::cli
