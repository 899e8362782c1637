// The scheduler's Prometheus metrics, all defined here (names and meanings:
// docs/metrics.md). Two sources feed them:
//  - request events (it is the scheduler's RequestObserver): TTFT,
//    inter-token latency, end-to-end and queue time, token counters,
//    outcomes by finish reason and by error code;
//  - Refresh(), called just before each scrape with the scheduler's load:
//    running/waiting requests, KV cache usage and configuration,
//    preemptions, prefix-cache queries and hits, prefill tokens,
//    micro-batches in flight, readiness.
// The vLLM-compatible subset carries vLLM's names and its model_name label,
// so the Kubernetes inference gateway, KEDA and vLLM dashboards read spar
// unchanged; spar's own figures are prefixed spar_.
//
// Thread-safe.
#ifndef SPAR_SERVICES_METRICS_SCHEDULER_METRICS_H_
#define SPAR_SERVICES_METRICS_SCHEDULER_METRICS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "services/scheduler/request_observer.h"

namespace spar {

// The scheduler's load at scrape time (from Scheduler::Load()).
struct SchedulerGauges {
  int64_t running = 0;             // sequences running (admitted, holding KV blocks)
  int64_t waiting = 0;             // sequences waiting for admission
  int64_t active_requests = 0;     // requests with an open stream
  int64_t used_blocks = 0;
  int64_t total_blocks = 0;
  int64_t block_size = 64;         // tokens per KV block
  uint64_t preemptions = 0;        // since start (monotonic)
  uint64_t micro_batches = 0;      // since start (monotonic)
  uint64_t prefill_tokens = 0;     // prompt positions computed, since start (monotonic)
  bool prefix_caching = false;
  uint64_t prefix_cache_queries = 0;  // tokens, since start (monotonic)
  uint64_t prefix_cache_hits = 0;     // tokens, since start (monotonic)
  int64_t prefix_cache_blocks = 0;    // blocks holding reusable content now
  std::string cache_dtype;         // the stages' cache formats, "bf16/fp8" per stage
  int64_t in_flight = 0;           // micro-batches on the pipeline now
  SpecDecodeCounts spec;           // speculative decoding since start (monotonic)
  int64_t stages = 0;
  bool pipeline_ready = false;
  bool draining = false;
};

class SchedulerMetrics final : public RequestObserver {
 public:
  // Registers every family in `registry`. `model_name` labels the vLLM
  // series (the served model name). `clock` is for tests.
  SchedulerMetrics(prometheus::Registry* registry, std::string model_name,
                   std::function<absl::Time()> clock = [] { return absl::Now(); });

  void Refresh(const SchedulerGauges& gauges);

  // RequestObserver.
  void OnAdmitted(const std::string& request_id, int prompt_tokens, int num_seqs) override;
  void OnRejected(absl::StatusCode code) override;
  void OnScheduled(const std::string& request_id) override;
  void OnOutputToken(const std::string& request_id, int index) override;
  void OnSequenceFinished(const std::string& request_id, int index, SeqFinishReason reason) override;
  void OnRequestEnded(const std::string& request_id, const absl::Status& status) override;

  // Requests being timed (tests).
  size_t tracked_requests() const;

 private:
  struct Timeline {
    absl::Time arrival;
    bool scheduled = false;
    bool first_token = false;
    int prompt_tokens = 0;
    int64_t generated = 0;
    std::vector<absl::Time> last_token;  // per sequence; InfinitePast before its first
  };

  prometheus::Counter& ErrorCounterLocked(absl::StatusCode code);
  void CountErrorLocked(absl::StatusCode code);

  const std::string model_name_;
  const std::function<absl::Time()> clock_;
  prometheus::Registry* registry_;

  mutable std::mutex mu_;
  std::unordered_map<std::string, Timeline> requests_;
  uint64_t preemptions_seen_ = 0;
  uint64_t micro_batches_seen_ = 0;
  uint64_t prefill_tokens_seen_ = 0, prefix_queries_seen_ = 0, prefix_hits_seen_ = 0;
  SpecDecodeCounts spec_seen_;
  std::string cache_info_labels_;  // label values of the current cache_config_info series

  // vLLM-compatible (labels: model_name).
  prometheus::Gauge* running_;
  prometheus::Gauge* waiting_;
  prometheus::Gauge* kv_usage_;
  prometheus::Family<prometheus::Gauge>* cache_info_family_;
  prometheus::Gauge* cache_info_ = nullptr;
  prometheus::Counter* preemptions_;
  prometheus::Counter* prefix_cache_queries_;
  prometheus::Counter* prefix_cache_hits_;
  prometheus::Counter* prompt_tokens_;
  prometheus::Counter* generation_tokens_;
  prometheus::Family<prometheus::Counter>* success_family_;
  std::map<std::string, prometheus::Counter*> success_;  // by finished_reason
  prometheus::Counter* spec_drafts_;
  prometheus::Counter* spec_draft_tokens_;
  prometheus::Counter* spec_accepted_tokens_;
  std::vector<prometheus::Counter*> spec_accepted_per_pos_;  // by draft position
  prometheus::Histogram* ttft_;
  prometheus::Histogram* itl_;
  prometheus::Histogram* e2e_;
  prometheus::Histogram* queue_time_;
  prometheus::Histogram* request_prompt_tokens_;
  prometheus::Histogram* request_generation_tokens_;
  // spar's own.
  prometheus::Family<prometheus::Counter>* errors_family_;
  std::map<absl::StatusCode, prometheus::Counter*> errors_;  // by code
  prometheus::Gauge* active_requests_;
  prometheus::Gauge* in_flight_;
  prometheus::Counter* micro_batches_;
  prometheus::Counter* prefill_tokens_;
  prometheus::Gauge* prefix_cache_blocks_;
  prometheus::Gauge* stages_;
  prometheus::Gauge* pipeline_ready_;
  prometheus::Gauge* draining_;
};

}  // namespace spar

#endif  // SPAR_SERVICES_METRICS_SCHEDULER_METRICS_H_
