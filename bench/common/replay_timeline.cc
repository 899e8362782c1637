#include "bench/common/replay_timeline.h"

#include <algorithm>
#include <map>
#include <utility>

namespace spar::bench {

ReplayTimeline LastReplay(const std::vector<TimelineEvent>& events) {
  std::map<uint32_t, int> per_launch;
  for (const TimelineEvent& e : events) ++per_launch[e.correlation];
  ReplayTimeline r;
  uint32_t last = 0;
  bool found = false;
  for (const auto& [correlation, n] : per_launch) {
    if (n > 1) {
      last = correlation;
      found = true;
    }
  }
  if (!found) return r;
  for (const TimelineEvent& e : events) {
    if (e.correlation == last) r.events.push_back(e);
  }
  std::stable_sort(r.events.begin(), r.events.end(),
                   [](const TimelineEvent& a, const TimelineEvent& b) { return a.start_ns < b.start_ns; });
  const uint64_t t0 = r.events.front().start_ns;
  uint64_t busy_end = t0;
  for (const TimelineEvent& e : r.events) {
    const uint64_t gap = e.start_ns > busy_end ? e.start_ns - busy_end : 0;
    r.idle_before_ns.push_back(gap);
    // The union of the events: only the part past what already ran counts.
    const uint64_t from = std::max(e.start_ns, busy_end);
    if (e.end_ns > from) r.busy_ns += e.end_ns - from;
    busy_end = std::max(busy_end, e.end_ns);
  }
  r.span_ns = busy_end - t0;
  r.idle_ns = r.span_ns - r.busy_ns;
  return r;
}

void PrintLastReplay(const std::vector<TimelineEvent>& events, const std::string& title, FILE* out) {
  const ReplayTimeline r = LastReplay(events);
  if (r.events.empty()) {
    std::fprintf(out, "\n%s: no launch with more than one event recorded (%zu events)\n", title.c_str(), events.size());
    return;
  }
  const uint64_t t0 = r.events.front().start_ns;
  std::fprintf(out, "\n%s: the GPU timeline of the last graph replay (%zu events)\n", title.c_str(), r.events.size());
  std::fprintf(out, "| # | event | stream | start us | duration us | idle before us |\n|---|---|---|---|---|---|\n");
  std::vector<std::pair<uint64_t, size_t>> gaps;  // (idle ns before event i, i)
  for (size_t i = 0; i < r.events.size(); ++i) {
    const TimelineEvent& e = r.events[i];
    if (r.idle_before_ns[i] > 0) gaps.emplace_back(r.idle_before_ns[i], i);
    std::fprintf(out, "| %zu | %s | %u | %.2f | %.2f | %.2f |\n", i, e.name.c_str(), e.stream, (e.start_ns - t0) * 1e-3,
                 (e.end_ns - e.start_ns) * 1e-3, r.idle_before_ns[i] * 1e-3);
  }
  std::fprintf(out, "span %.2f us: busy %.2f us (some event running), idle %.2f us in %zu gaps\n", r.span_ns * 1e-3,
               r.busy_ns * 1e-3, r.idle_ns * 1e-3, gaps.size());
  std::sort(gaps.begin(), gaps.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t g = 0; g < std::min<size_t>(gaps.size(), 8); ++g) {
    const size_t i = gaps[g].second;
    std::fprintf(out, "  idle %.2f us before #%zu %s (after #%zu %s)\n", gaps[g].first * 1e-3, i,
                 r.events[i].name.c_str(), i - 1, r.events[i - 1].name.c_str());
  }
}

}  // namespace spar::bench
