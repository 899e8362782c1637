// Child processes for `spar cluster` and the multi-process tests: spawn with
// the parent's death signal set (a child never outlives a crashed parent),
// stop with SIGTERM then SIGKILL, never leave a zombie.
#ifndef SPAR_SERVICES_COMMON_SUBPROCESS_H_
#define SPAR_SERVICES_COMMON_SUBPROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace spar {

struct SpawnOptions {
  // stdout and stderr go to this file (appended) when set; else inherited.
  std::string log_path;
};

// One child process. Thread-compatible. The destructor stops the child.
class ChildProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(const std::vector<std::string>& argv,
                                                             const SpawnOptions& options = {});
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& name() const { return name_; }
  // Whether the child is still running (reaps it when it has exited).
  bool Running();
  // Exit status as from waitpid (valid once Running() is false).
  int wait_status() const { return wait_status_; }
  // Human-readable exit description ("exited 1", "killed by signal 9").
  std::string ExitDescription() const;
  // SIGTERM, up to `grace` for it to exit, then SIGKILL; reaps it.
  void Stop(absl::Duration grace = absl::Seconds(5));
  // Sends `signal` without waiting.
  void Signal(int signal);

 private:
  ChildProcess(pid_t pid, std::string name) : pid_(pid), name_(std::move(name)) {}
  pid_t pid_;
  std::string name_;
  bool exited_ = false;
  int wait_status_ = 0;
};

// Waits until `path` holds a port number (see WritePortFile). Fails when
// `timeout` passes or `child` (if given) exits first.
absl::StatusOr<int> WaitForPortFile(const std::string& path, absl::Duration timeout, ChildProcess* child = nullptr);

// The directory of the running executable (/proc/self/exe).
std::string SelfExeDir();
std::string SelfExePath();

}  // namespace spar

#endif  // SPAR_SERVICES_COMMON_SUBPROCESS_H_
