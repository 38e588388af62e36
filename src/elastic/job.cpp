#include "elastic/job.h"

#include "train/run_dir.h"

namespace ntp::elastic {

LaunchResult run_job(LaunchOptions options, const JobReporting& reporting) {
  std::unique_ptr<train::JsonlWriter> events;
  if (!reporting.events_file.empty()) {
    events = std::make_unique<train::JsonlWriter>(reporting.events_file);
  }
  auto user_event = options.on_event;
  options.on_event = [&](const std::string& event, const RankExit& r) {
    if (events) {
      nlohmann::json line = {{"time", train::unix_time_s()}, {"event", event}, {"rank", r.rank},
                             {"pid", r.pid}};
      if (!r.running) {
        line["exit_code"] = r.exited ? nlohmann::json(r.code) : nlohmann::json(nullptr);
        line["signal"] = r.exited ? nlohmann::json(nullptr) : nlohmann::json(r.signal);
        line["stopped_by_launcher"] = r.stopped_by_launcher;
        line["description"] = r.describe();
      }
      events->append(line);
    }
    if (!r.running && !r.ok() && reporting.failures != nullptr) {
      std::fprintf(reporting.failures, "%s: %s\n", reporting.prefix, r.describe().c_str());
      std::fflush(reporting.failures);
    }
    if (user_event) user_event(event, r);
  };
  return launch(options);
}

}  // namespace ntp::elastic
