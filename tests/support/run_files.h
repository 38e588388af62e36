#pragma once
// What the tests and benchmarks that drive `ntp train` from the outside share:
// reading the run directory's .jsonl files while workers still write them,
// and starting a command with its output in a file (so that its worker pids
// can be signalled while it runs).
#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ntp::testing {

// The complete JSON lines of a .jsonl file; a line still being written (or
// cut short) is skipped. A missing file reads as no lines.
std::vector<nlohmann::json> read_jsonl_lines(const std::filesystem::path& path);

// The events named `name` in RUN_DIR/events.jsonl.
std::vector<nlohmann::json> events_named(const std::filesystem::path& run_dir, const std::string& name);

// Starts `args` (looked up on PATH) with stdout and stderr into `out`; returns
// its pid. Throws std::runtime_error naming the command when it cannot start.
pid_t spawn_logged(const std::vector<std::string>& args, const std::filesystem::path& out);

// A run of `args` (an `ntp train` of `run_dir`) that got `signal` to worker
// `rank` (its pid from worker_started) half a step after metrics.jsonl had
// `rows` rows, so that it lands inside a step. Waits for the run to end;
// the worker is SIGKILLed afterwards should it still be there (stopped).
struct SignalledRun {
  int code = -1;        // the run's exit status (128 + signal when killed)
  double sent_at = 0;   // unix seconds of the signal; 0 when the run ended before it
};
SignalledRun signal_mid_run(const std::vector<std::string>& args, const std::filesystem::path& run_dir,
                            const std::filesystem::path& out, int rank, int signal, std::size_t rows);

// Writes a text data file of 1500 numbered lines whose words are `word`,
// atomically (a dataset regenerated in place): another word, other tokens.
void write_text_data(const std::filesystem::path& path, const std::string& word);

// Whether `pid` is a live process (not a zombie) whose command line names
// `text`: a reused pid of another program is not the one a test started.
bool alive_naming(pid_t pid, const std::string& text);

// Every live process whose command line names `text`.
std::vector<pid_t> processes_naming(const std::string& text);

}  // namespace ntp::testing
