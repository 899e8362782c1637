// `spar cluster`'s own Prometheus metrics (names and meanings:
// docs/metrics.md): how often it restarted each daemon it supervises, and
// whether each is running now. Served on the cluster's metrics port next to
// the daemons' own.
//
// Thread-safe.
#ifndef SPAR_SERVICES_METRICS_CLUSTER_METRICS_H_
#define SPAR_SERVICES_METRICS_CLUSTER_METRICS_H_

#include <map>
#include <mutex>
#include <utility>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

namespace spar {

class ClusterMetrics {
 public:
  explicit ClusterMetrics(prometheus::Registry* registry);

  // Creates the series of one worker (TP rank `rank` of `stage`) at 0, so a
  // restart is a change a query sees.
  void AddWorker(int stage, int rank);
  void OnWorkerRestart(int stage, int rank);
  void OnSchedulerRestart();
  void SetWorkerUp(int stage, int rank, bool up);
  void SetSchedulerUp(bool up);

 private:
  struct WorkerSeries {
    prometheus::Counter* restarts;
    prometheus::Gauge* up;
  };
  WorkerSeries& Worker(int stage, int rank);

  prometheus::Family<prometheus::Counter>* worker_restarts_;
  prometheus::Family<prometheus::Gauge>* worker_up_;
  prometheus::Counter* scheduler_restarts_;
  prometheus::Gauge* scheduler_up_;
  std::mutex mu_;  // guards workers_
  std::map<std::pair<int, int>, WorkerSeries> workers_;
};

}  // namespace spar

#endif  // SPAR_SERVICES_METRICS_CLUSTER_METRICS_H_
