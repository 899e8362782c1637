#include "services/cli/restart_backoff.h"

#include <algorithm>

namespace spar {

absl::Duration RestartBackoff::Died(absl::Time now) {
  if (now - started_ >= options_.reset_after) next_ = options_.initial;
  const absl::Duration delay = next_;
  next_ = std::min(next_ * 2, options_.max);
  return delay;
}

}  // namespace spar
