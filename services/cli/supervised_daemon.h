// One daemon of `spar cluster` under supervision: its command line, its log
// file, the running child process and, once the child died, when it starts
// again (RestartBackoff). The cluster's thread polls every daemon; Poll()
// notices a death, logs it (which daemon, how it ended, the attempt) and
// starts the daemon again when its back-off has passed, with the same
// command line except for the flags SetFlag pinned (the ports the first
// start picked, so the scheduler and clients find it where it was).
//
// Thread-compatible: one supervising thread.
#ifndef SPAR_SERVICES_CLI_SUPERVISED_DAEMON_H_
#define SPAR_SERVICES_CLI_SUPERVISED_DAEMON_H_

#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "services/cli/restart_backoff.h"
#include "services/common/subprocess.h"

namespace spar {

// Which daemon: the scheduler, or tensor-parallel rank `rank` of `stage`'s
// worker group (rank 0 is the stage leader).
struct DaemonRole {
  static DaemonRole Scheduler() { return {-1, 0}; }
  static DaemonRole Worker(int stage, int rank) { return {stage, rank}; }
  bool scheduler() const { return stage < 0; }
  // "the scheduler", "the stage 1 worker", "stage 1's tensor-parallel rank 2".
  std::string Describe() const;

  int stage = -1;
  int rank = 0;
};

class SupervisedDaemon {
 public:
  enum class Event { kNone, kDied, kRestarted };

  SupervisedDaemon(DaemonRole role, std::vector<std::string> argv, std::string log_path,
                   RestartBackoffOptions backoff = {})
      : role_(role), argv_(std::move(argv)), log_path_(std::move(log_path)), backoff_(backoff) {}

  // The first start (not counted as a restart).
  absl::Status Start(absl::Time now);
  // Sets `--flag value` on the command line of later starts.
  void SetFlag(const std::string& flag, const std::string& value);
  // Notices a death or performs a due restart; logs a line to `log` for each.
  Event Poll(absl::Time now, std::ostream& log);
  // SIGTERM, `grace`, then SIGKILL; no restart afterwards.
  void Stop(absl::Duration grace);

  const DaemonRole& role() const { return role_; }
  const std::string& log_path() const { return log_path_; }
  // The current child (null before Start); it may have exited.
  ChildProcess* child() { return child_.get(); }
  bool running() { return child_ != nullptr && child_->Running(); }
  int restarts() const { return restarts_; }

 private:
  void ScheduleRestart(absl::Time now, const std::string& what, std::ostream& log);

  DaemonRole role_;
  std::vector<std::string> argv_;
  std::string log_path_;
  RestartBackoff backoff_;
  std::unique_ptr<ChildProcess> child_;
  std::optional<absl::Time> restart_at_;  // set while dead
  bool stopped_ = false;
  int restarts_ = 0;
};

}  // namespace spar

#endif  // SPAR_SERVICES_CLI_SUPERVISED_DAEMON_H_
