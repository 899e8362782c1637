#include "services/cli/supervised_daemon.h"

#include "absl/strings/str_cat.h"

namespace spar {

std::string DaemonRole::Describe() const {
  if (scheduler()) return "the scheduler";
  if (rank == 0) return absl::StrCat("the stage ", stage, " worker");
  return absl::StrCat("stage ", stage, "'s tensor-parallel rank ", rank);
}

absl::Status SupervisedDaemon::Start(absl::Time now) {
  auto child = ChildProcess::Spawn(argv_, {log_path_});
  if (!child.ok()) return child.status();
  child_ = std::move(*child);
  backoff_.Started(now);
  return absl::OkStatus();
}

void SupervisedDaemon::SetFlag(const std::string& flag, const std::string& value) {
  const std::string name = "--" + flag;
  for (size_t i = 0; i + 1 < argv_.size(); ++i) {
    if (argv_[i] == name) {
      argv_[i + 1] = value;
      return;
    }
  }
  argv_.insert(argv_.end(), {name, value});
}

void SupervisedDaemon::ScheduleRestart(absl::Time now, const std::string& what, std::ostream& log) {
  const absl::Duration delay = backoff_.Died(now);
  restart_at_ = now + delay;
  log << "spar cluster: " << what << "; restarting it in " << absl::FormatDuration(delay) << " (restart "
      << restarts_ + 1 << "; log: " << log_path_ << ")" << std::endl;
}

SupervisedDaemon::Event SupervisedDaemon::Poll(absl::Time now, std::ostream& log) {
  if (stopped_ || child_ == nullptr) return Event::kNone;
  if (!restart_at_) {
    if (child_->Running()) return Event::kNone;
    ScheduleRestart(now, absl::StrCat(role_.Describe(), " (pid ", child_->pid(), ") ", child_->ExitDescription()), log);
    return Event::kDied;
  }
  if (now < *restart_at_) return Event::kNone;
  restart_at_.reset();
  auto child = ChildProcess::Spawn(argv_, {log_path_});
  if (!child.ok()) {
    ScheduleRestart(now, absl::StrCat(role_.Describe(), " could not be started: ", child.status().message()), log);
    return Event::kNone;
  }
  child_ = std::move(*child);
  backoff_.Started(now);
  ++restarts_;
  log << "spar cluster: restarted " << role_.Describe() << " (pid " << child_->pid() << ", restart " << restarts_ << ")"
      << std::endl;
  return Event::kRestarted;
}

void SupervisedDaemon::Stop(absl::Duration grace) {
  stopped_ = true;
  restart_at_.reset();
  if (child_ != nullptr) child_->Stop(grace);
}

}  // namespace spar
