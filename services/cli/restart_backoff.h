// When `spar cluster` starts a daemon again after it died: a pure policy,
// as a process supervisor's restart back-off (systemd's RestartSec,
// Kubernetes' CrashLoopBackOff). The first restart waits `initial`, each
// further one twice as long up to `max`; a daemon that stayed up for
// `reset_after` is healthy again, and its next death waits `initial`.
#ifndef SPAR_SERVICES_CLI_RESTART_BACKOFF_H_
#define SPAR_SERVICES_CLI_RESTART_BACKOFF_H_

#include "absl/time/time.h"

namespace spar {

struct RestartBackoffOptions {
  absl::Duration initial = absl::Milliseconds(500);
  absl::Duration max = absl::Seconds(30);
  absl::Duration reset_after = absl::Seconds(60);
};

class RestartBackoff {
 public:
  explicit RestartBackoff(RestartBackoffOptions options = {}) : options_(options), next_(options.initial) {}

  // The daemon was (re)started at `now`.
  void Started(absl::Time now) { started_ = now; }
  // The daemon died at `now`: how long to wait before starting it again.
  absl::Duration Died(absl::Time now);

 private:
  RestartBackoffOptions options_;
  absl::Duration next_;
  absl::Time started_ = absl::InfinitePast();
};

}  // namespace spar

#endif  // SPAR_SERVICES_CLI_RESTART_BACKOFF_H_
