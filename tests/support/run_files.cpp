#include "run_files.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace ntp::testing {

std::vector<nlohmann::json> read_jsonl_lines(const std::filesystem::path& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    try {
      lines.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::parse_error&) {  // a line being written
    }
  }
  return lines;
}

void write_text_data(const std::filesystem::path& path, const std::string& word) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp);
    for (int i = 0; i < 1500; ++i) out << "line " << i << " of the " << word << " data, as " << word << " as it was\n";
  }
  std::filesystem::rename(tmp, path);
}

bool alive_naming(pid_t pid, const std::string& text) {
  const std::filesystem::path proc = "/proc/" + std::to_string(pid);
  std::ifstream stat(proc / "stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  // The state follows the command name, which may itself hold ')'.
  const std::size_t paren = line.rfind(')');
  if (paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z') return false;
  std::ifstream cmd(proc / "cmdline", std::ios::binary);
  const std::string cmdline((std::istreambuf_iterator<char>(cmd)), std::istreambuf_iterator<char>());
  return cmdline.find(text) != std::string::npos;
}

std::vector<pid_t> processes_naming(const std::string& text) {
  std::vector<pid_t> found;
  std::error_code ec;
  for (const std::filesystem::directory_entry& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stoi(name));
    if (alive_naming(pid, text)) found.push_back(pid);
  }
  return found;
}

std::vector<nlohmann::json> events_named(const std::filesystem::path& run_dir, const std::string& name) {
  std::vector<nlohmann::json> out;
  for (const nlohmann::json& e : read_jsonl_lines(run_dir / "events.jsonl")) {
    if (e.value("event", "") == name) out.push_back(e);
  }
  return out;
}

pid_t spawn_logged(const std::vector<std::string>& args, const std::filesystem::path& out) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) throw std::runtime_error("cannot start " + args.at(0) + ": " + std::strerror(err));
  return pid;
}

SignalledRun signal_mid_run(const std::vector<std::string>& args, const std::filesystem::path& run_dir,
                            const std::filesystem::path& out, int rank, int signal, std::size_t rows) {
  const pid_t child = spawn_logged(args, out);
  SignalledRun run;
  int pid = 0;
  int status = 0;
  while (::waitpid(child, &status, WNOHANG) != child) {
    if (run.sent_at == 0) {
      const std::vector<nlohmann::json> metrics = read_jsonl_lines(run_dir / "metrics.jsonl");
      if (metrics.size() >= rows) {
        for (const nlohmann::json& e : events_named(run_dir, "worker_started")) {
          if (e["rank"] == rank) pid = e["pid"].get<int>();
        }
        std::this_thread::sleep_for(std::chrono::duration<double>(0.5 * metrics.back().value("step_time_s", 0.0)));
        run.sent_at = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
        if (pid <= 0 || ::kill(pid, signal) != 0) {
          ::kill(child, SIGKILL);
          throw std::runtime_error("no worker pid for rank " + std::to_string(rank));
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (pid > 0) ::kill(pid, SIGKILL);  // never leave a stopped worker behind (fenced already: a no-op)
  run.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return run;
}

}  // namespace ntp::testing
