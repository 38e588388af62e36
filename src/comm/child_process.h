#pragma once
// ChildProcess: a local rank started with fork/exec, for `ntp bench comm
// --nproc N` and the multi-process tests. Every wait is bounded and the
// destructor kills (SIGKILL) and reaps a child that is still running, so no
// process outlives its owner.
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

namespace ntp::comm {

class ChildProcess {
 public:
  // Starts argv[0] (a path) with argv and the current environment plus `env`
  // ("KEY=VALUE", replacing inherited variables of that name). stdout/stderr
  // go to `log_path` if given. The child is killed (SIGKILL) when this process
  // dies; Linux ties that to the starting thread, so start children from a
  // thread that outlives them.
  ChildProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
               const std::string& log_path = "");
  ~ChildProcess();
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&&) = delete;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  void signal(int sig) const;
  // Waits up to `timeout` for the exit; returns the wait status, or nothing
  // if it is still running.
  std::optional<int> wait_for(std::chrono::milliseconds timeout);
  bool exited() const { return status_.has_value(); }

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

// "exit 0", "exit 3", "killed by signal 9" for a wait status.
std::string describe_wait_status(int status);

// Path of the running executable (/proc/self/exe).
std::string self_executable();

}  // namespace ntp::comm
