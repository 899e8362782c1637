#include "services/metrics/busy_window.h"

#include <algorithm>

namespace spar {

void BusyWindow::Begin(absl::Time start) {
  if (running_) End(start);
  running_ = start;
  if (!first_) first_ = start;
}

void BusyWindow::End(absl::Time end) {
  if (!running_) return;
  if (end > *running_) done_.emplace_back(*running_, end);
  running_.reset();
  Prune(end);
}

void BusyWindow::Prune(absl::Time now) {
  const absl::Time from = now - window_;
  while (!done_.empty() && done_.front().second <= from) done_.pop_front();
}

double BusyWindow::Fraction(absl::Time now) {
  if (!first_) return 0.0;
  Prune(now);
  const absl::Time from = std::max(now - window_, *first_);
  const absl::Duration span = now - from;
  if (span <= absl::ZeroDuration()) return running_ ? 1.0 : 0.0;
  absl::Duration busy = absl::ZeroDuration();
  for (const auto& [start, end] : done_) {
    const absl::Time s = std::max(start, from), e = std::min(end, now);
    if (e > s) busy += e - s;
  }
  if (running_ && now > std::max(*running_, from)) busy += now - std::max(*running_, from);
  return std::clamp(absl::FDivDuration(busy, span), 0.0, 1.0);
}

}  // namespace spar
