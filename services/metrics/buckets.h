// Histogram bucket boundaries, in one place so the scheduler and worker
// metrics (and docs/metrics.md) agree. The request-level ones are vLLM's
// (vllm/v1/metrics/loggers.py), so dashboards and SLO queries written for
// vLLM read the same buckets from spar.
#ifndef SPAR_SERVICES_METRICS_BUCKETS_H_
#define SPAR_SERVICES_METRICS_BUCKETS_H_

#include <vector>

namespace spar::metrics {

// Time to first token (seconds).
inline const std::vector<double>& TtftBuckets() {
  static const std::vector<double> b = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
                                        1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
  return b;
}

// Inter-token latency (seconds).
inline const std::vector<double>& ItlBuckets() {
  static const std::vector<double> b = {0.01, 0.025, 0.05, 0.075, 0.1,  0.15, 0.2,  0.3,  0.4, 0.5,
                                        0.75, 1.0,   2.5,  5.0,   7.5,  10.0, 20.0, 40.0, 80.0};
  return b;
}

// Whole-request intervals: end-to-end latency, queue time (seconds).
inline const std::vector<double>& RequestLatencyBuckets() {
  static const std::vector<double> b = {0.3,  0.5,  0.8,  1.0,  1.5,  2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
                                        30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
  return b;
}

// Token counts per request (prompt, generation): 1, 2, 5 steps up to 1M.
inline const std::vector<double>& TokenCountBuckets() {
  static const std::vector<double> b = {1,     2,     5,     10,     20,     50,     100,     200,    500,
                                        1000,  2000,  5000,  10000,  20000,  50000,  100000,  200000, 500000,
                                        1000000};
  return b;
}

// Per-micro-batch stage times (forward, queueing, activation transfer,
// all-reduce): from 50 us to 60 s. A decode step of one stage is
// milliseconds on GPUs, a long prefill chunk or the cpu backend seconds.
inline const std::vector<double>& StageTimeBuckets() {
  static const std::vector<double> b = {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                        0.05,    0.1,    0.25,    0.5,    1.0,   2.5,    5.0,   10.0, 30.0, 60.0};
  return b;
}

}  // namespace spar::metrics

#endif  // SPAR_SERVICES_METRICS_BUCKETS_H_
