// The share of a trailing time window a stage spent executing micro-batches
// (spar_stage_busy_fraction). Exact: it keeps the execution intervals that
// overlap the window and counts a micro-batch still running up to `now`.
// The cumulative counter spar_stage_busy_seconds_total is the scrape-rate
// independent form; this gauge is what a person reads on a dashboard.
//
// Thread-compatible.
#ifndef SPAR_SERVICES_METRICS_BUSY_WINDOW_H_
#define SPAR_SERVICES_METRICS_BUSY_WINDOW_H_

#include <deque>
#include <optional>
#include <utility>

#include "absl/time/time.h"

namespace spar {

class BusyWindow {
 public:
  explicit BusyWindow(absl::Duration window) : window_(window) {}

  // A micro-batch started / ended executing. An End without a Begin, or a
  // second Begin, is tolerated (the earlier one is closed at that time).
  void Begin(absl::Time start);
  void End(absl::Time end);
  // Busy share of [now - window, now], in [0, 1]. Before a whole window
  // has passed since the first Begin, of the time since then.
  double Fraction(absl::Time now);

  absl::Duration window() const { return window_; }

 private:
  void Prune(absl::Time now);

  const absl::Duration window_;
  std::deque<std::pair<absl::Time, absl::Time>> done_;  // [start, end), oldest first
  std::optional<absl::Time> running_;
  std::optional<absl::Time> first_;
};

}  // namespace spar

#endif  // SPAR_SERVICES_METRICS_BUSY_WINDOW_H_
