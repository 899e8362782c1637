#include "services/metrics/cluster_metrics.h"

#include <string>

namespace spar {

using prometheus::BuildCounter;
using prometheus::BuildGauge;

ClusterMetrics::ClusterMetrics(prometheus::Registry* registry) {
  worker_restarts_ = &BuildCounter()
                          .Name("spar_cluster_worker_restarts_total")
                          .Help("Times spar cluster started a worker again after it died")
                          .Register(*registry);
  worker_up_ = &BuildGauge()
                    .Name("spar_cluster_worker_up")
                    .Help("1 while the worker process runs, 0 while it waits to be restarted")
                    .Register(*registry);
  scheduler_restarts_ = &BuildCounter()
                             .Name("spar_cluster_scheduler_restarts_total")
                             .Help("Times spar cluster started the scheduler again after it died")
                             .Register(*registry)
                             .Add({});
  scheduler_up_ = &BuildGauge()
                       .Name("spar_cluster_scheduler_up")
                       .Help("1 while the scheduler process runs, 0 while it waits to be restarted")
                       .Register(*registry)
                       .Add({});
}

// The series live as long as the registry (the family owns them); the map
// only finds them. prometheus-cpp's metrics themselves are thread-safe.
ClusterMetrics::WorkerSeries& ClusterMetrics::Worker(int stage, int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workers_.find({stage, rank});
  if (it != workers_.end()) return it->second;
  const std::map<std::string, std::string> labels = {{"stage", std::to_string(stage)}, {"rank", std::to_string(rank)}};
  WorkerSeries s{&worker_restarts_->Add(labels), &worker_up_->Add(labels)};
  return workers_.emplace(std::make_pair(stage, rank), s).first->second;
}

void ClusterMetrics::AddWorker(int stage, int rank) { Worker(stage, rank); }
void ClusterMetrics::OnWorkerRestart(int stage, int rank) { Worker(stage, rank).restarts->Increment(); }
void ClusterMetrics::OnSchedulerRestart() { scheduler_restarts_->Increment(); }
void ClusterMetrics::SetWorkerUp(int stage, int rank, bool up) { Worker(stage, rank).up->Set(up ? 1 : 0); }
void ClusterMetrics::SetSchedulerUp(bool up) { scheduler_up_->Set(up ? 1 : 0); }

}  // namespace spar
