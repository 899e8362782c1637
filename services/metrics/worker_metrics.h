// A stage worker's Prometheus metrics, all defined here (names and meanings:
// docs/metrics.md), labelled by pipeline stage: per-micro-batch forward,
// sampling and queueing times, activation transfer time and bytes, busy
// time and busy fraction, queue depth, NCCL all-reduce time, device memory
// for weights and caches. The compute thread reports each micro-batch, the
// link to the next stage each send, and Refresh() (just before a scrape)
// sets the gauges.
//
// Thread-safe.
#ifndef SPAR_SERVICES_METRICS_WORKER_METRICS_H_
#define SPAR_SERVICES_METRICS_WORKER_METRICS_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "services/metrics/busy_window.h"

namespace spar {

// One executed micro-batch as the compute thread saw it.
struct MicroBatchObservation {
  int stage = 0;
  absl::Time start, end;                       // execution
  absl::Duration queued = absl::ZeroDuration();  // arrival to start
  absl::Duration forward = absl::ZeroDuration();   // the layers (and lm_head on the last stage)
  absl::Duration sampling = absl::ZeroDuration();  // last stage
  std::vector<absl::Duration> allreduce;           // one per NCCL all-reduce (empty without TP)
  int64_t tokens = 0;
  uint64_t bytes_in = 0;   // activations received
  bool ok = true;          // false: this stage failed it (the error travels on)
  bool executed = true;    // the forward ran (not failed upstream, not release-only)
};

// Gauges at scrape time.
struct WorkerGauges {
  int stage = -1;  // -1: not configured yet (stage gauges are not set)
  int first_layer = 0, last_layer = 0;
  std::string backend;
  bool loaded = false;
  int64_t queue_depth = 0;      // micro-batches waiting
  int64_t sampling_states = 0;  // last stage: live per-sequence states
  int64_t weights_bytes = 0;    // device memory: 0 on the cpu backend
  int64_t kv_cache_bytes = 0;
};

class WorkerMetrics {
 public:
  // `busy_window`: the trailing window of spar_stage_busy_fraction.
  explicit WorkerMetrics(prometheus::Registry* registry, absl::Duration busy_window = absl::Seconds(10));

  // Compute thread: a micro-batch started executing, and how it went.
  void OnMicroBatchStart(int stage, absl::Time start);
  void OnMicroBatch(const MicroBatchObservation& o);
  // Link to the next stage: one micro-batch's activations written in
  // `duration` (serialization and flow control included).
  void OnActivationsSent(int stage, absl::Duration duration, uint64_t bytes);
  void Refresh(const WorkerGauges& gauges, absl::Time now = absl::Now());

 private:
  struct Stage {
    prometheus::Histogram* forward;
    prometheus::Histogram* sampling;
    prometheus::Histogram* queued;
    prometheus::Histogram* transfer;
    prometheus::Histogram* allreduce;
    prometheus::Counter* micro_batches;
    prometheus::Counter* errors;
    prometheus::Counter* tokens;
    prometheus::Counter* busy_seconds;
    prometheus::Counter* bytes_received;
    prometheus::Counter* bytes_sent;
    prometheus::Gauge* busy_fraction;
    prometheus::Gauge* queue_depth;
    prometheus::Gauge* sampling_states;
    prometheus::Gauge* loaded;
    prometheus::Gauge* weights_bytes;
    prometheus::Gauge* kv_cache_bytes;
    BusyWindow busy;
  };
  Stage& StageLocked(int stage);

  prometheus::Registry* registry_;
  const absl::Duration busy_window_;
  std::mutex mu_;
  std::map<int, Stage> stages_;
  prometheus::Family<prometheus::Histogram>* forward_;
  prometheus::Family<prometheus::Histogram>* sampling_;
  prometheus::Family<prometheus::Histogram>* queued_;
  prometheus::Family<prometheus::Histogram>* transfer_;
  prometheus::Family<prometheus::Histogram>* allreduce_;
  prometheus::Family<prometheus::Counter>* micro_batches_;
  prometheus::Family<prometheus::Counter>* errors_;
  prometheus::Family<prometheus::Counter>* tokens_;
  prometheus::Family<prometheus::Counter>* busy_seconds_;
  prometheus::Family<prometheus::Counter>* activation_bytes_;
  prometheus::Family<prometheus::Gauge>* busy_fraction_;
  prometheus::Family<prometheus::Gauge>* queue_depth_;
  prometheus::Family<prometheus::Gauge>* sampling_states_;
  prometheus::Family<prometheus::Gauge>* loaded_;
  prometheus::Family<prometheus::Gauge>* gpu_memory_;
  prometheus::Family<prometheus::Gauge>* info_;
  prometheus::Gauge* info_series_ = nullptr;
  std::string info_key_;
};

}  // namespace spar

#endif  // SPAR_SERVICES_METRICS_WORKER_METRICS_H_
