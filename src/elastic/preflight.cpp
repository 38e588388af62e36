// The preflight of a host: its GPUs' power control (power.mode = "nvml")
// and its ephemeral port range, checked before any worker starts. Kept apart
// from the launch: each check is a pure refusal (PowerUnavailable,
// UnsupportedRequest) that changes nothing on the host.
#include "elastic/preflight.h"

#include <fmt/format.h>

#include <cstdint>
#include <optional>
#include <string>

#include "comm/port_budget.h"
#include "elastic/train_job.h"
#include "elastic/world.h"
#include "power/rank_power.h"
#include "train/ntp_trainer.h"
#include "train/power_setup.h"

namespace ntp::elastic {

void check_power(const train::Config& config, int local_ranks) {
  if (config.power.mode != power::PowerMode::nvml) return;
  const Environment env = current_environment();
  for (int local = 0; local < local_ranks; ++local) {
    try {
      power::RankPowerOptions options =
          train::rank_power_options(config.power, gpu_of_local_rank(env, local));
      options.restore_on_signal = false;
      const power::RankPower probe(options);
    } catch (const std::exception& e) {  // PowerError, or too few CUDA_VISIBLE_DEVICES
      throw PowerUnavailable(fmt::format("power.mode = \"nvml\": {}", e.what()));
    }
  }
}

void check_ports(const train::Config& config, int local_ranks, std::int64_t world) {
  if (world < 2) return;  // one rank trains in-process, without groups
  const std::optional<comm::PortRange> range = comm::ephemeral_port_range();
  if (!range) return;
  const std::int64_t pipeline = config.parallel.pp > 1 ? config.parallel.pp * config.parallel.tp : 1;
  const comm::RankGroups groups{world, config.parallel.tp, config.parallel.dp, pipeline};
  if (const std::optional<std::string> shortfall = comm::port_shortfall(local_ranks, groups, *range)) {
    throw UnsupportedRequest(*shortfall);
  }
}

}  // namespace ntp::elastic
