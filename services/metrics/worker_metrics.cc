#include "services/metrics/worker_metrics.h"

#include "absl/strings/str_cat.h"
#include "services/metrics/buckets.h"

namespace spar {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

}  // namespace

WorkerMetrics::WorkerMetrics(prometheus::Registry* registry, absl::Duration busy_window)
    : registry_(registry), busy_window_(busy_window) {
  forward_ = &BuildHistogram()
                  .Name("spar_stage_forward_seconds")
                  .Help("Forward time of one micro-batch through this stage's layers")
                  .Register(*registry);
  sampling_ = &BuildHistogram()
                   .Name("spar_stage_sampling_seconds")
                   .Help("Sampling time of one micro-batch (last stage only)")
                   .Register(*registry);
  queued_ = &BuildHistogram()
                 .Name("spar_stage_queue_seconds")
                 .Help("Time a micro-batch waited at this stage before executing")
                 .Register(*registry);
  transfer_ = &BuildHistogram()
                   .Name("spar_activation_transfer_seconds")
                   .Help("Time to send one micro-batch's activations to the next stage (serialization, flow control)")
                   .Register(*registry);
  allreduce_ = &BuildHistogram()
                    .Name("spar_nccl_allreduce_seconds")
                    .Help("Duration of one all-reduce inside the stage's tensor-parallel group (NCCL; cpu: the socket group)")
                    .Register(*registry);
  micro_batches_ = &BuildCounter()
                        .Name("spar_stage_micro_batches_total")
                        .Help("Micro-batches executed by this stage")
                        .Register(*registry);
  errors_ = &BuildCounter()
                 .Name("spar_stage_errors_total")
                 .Help("Micro-batches this stage failed (the error travels to the scheduler)")
                 .Register(*registry);
  tokens_ = &BuildCounter()
                 .Name("spar_stage_tokens_total")
                 .Help("Plan tokens (prefill and decode) executed by this stage")
                 .Register(*registry);
  busy_seconds_ = &BuildCounter()
                       .Name("spar_stage_busy_seconds_total")
                       .Help("Time this stage spent executing micro-batches; rate() is the busy fraction")
                       .Register(*registry);
  activation_bytes_ = &BuildCounter()
                           .Name("spar_activation_bytes_total")
                           .Help("Hidden-state bytes received from the previous stage or sent to the next")
                           .Register(*registry);
  busy_fraction_ = &BuildGauge()
                        .Name("spar_stage_busy_fraction")
                        .Help(absl::StrCat("Share of the last ", absl::FormatDuration(busy_window),
                                           " this stage spent executing micro-batches, 0 to 1"))
                        .Register(*registry);
  queue_depth_ = &BuildGauge()
                      .Name("spar_stage_queue_depth")
                      .Help("Micro-batches waiting at this stage")
                      .Register(*registry);
  sampling_states_ = &BuildGauge()
                          .Name("spar_stage_sampling_states")
                          .Help("Per-sequence sampling states held (last stage)")
                          .Register(*registry);
  loaded_ = &BuildGauge()
                 .Name("spar_stage_loaded")
                 .Help("1 once this stage's shard is loaded, else 0")
                 .Register(*registry);
  gpu_memory_ = &BuildGauge()
                     .Name("spar_gpu_memory_bytes")
                     .Help("Device memory held for weights and KV/indexer caches (0 on the cpu backend)")
                     .Register(*registry);
  info_ = &BuildGauge()
               .Name("spar_stage_info")
               .Help("This worker's stage as labels (stage, first_layer, last_layer, backend); value 1")
               .Register(*registry);
}

WorkerMetrics::Stage& WorkerMetrics::StageLocked(int stage) {
  auto it = stages_.find(stage);
  if (it != stages_.end()) return it->second;
  const prometheus::Labels l = {{"stage", absl::StrCat(stage)}};
  auto with = [&](const char* key, const char* value) {
    prometheus::Labels m = l;
    m[key] = value;
    return m;
  };
  Stage s{
      &forward_->Add(l, metrics::StageTimeBuckets()),
      &sampling_->Add(l, metrics::StageTimeBuckets()),
      &queued_->Add(l, metrics::StageTimeBuckets()),
      &transfer_->Add(l, metrics::StageTimeBuckets()),
      &allreduce_->Add(l, metrics::StageTimeBuckets()),
      &micro_batches_->Add(l),
      &errors_->Add(l),
      &tokens_->Add(l),
      &busy_seconds_->Add(l),
      &activation_bytes_->Add(with("direction", "received")),
      &activation_bytes_->Add(with("direction", "sent")),
      &busy_fraction_->Add(l),
      &queue_depth_->Add(l),
      &sampling_states_->Add(l),
      &loaded_->Add(l),
      &gpu_memory_->Add(with("kind", "weights")),
      &gpu_memory_->Add(with("kind", "kv_cache")),
      BusyWindow(busy_window_),
  };
  return stages_.emplace(stage, std::move(s)).first->second;
}

void WorkerMetrics::OnMicroBatchStart(int stage, absl::Time start) {
  std::lock_guard<std::mutex> lock(mu_);
  StageLocked(stage).busy.Begin(start);
}

void WorkerMetrics::OnMicroBatch(const MicroBatchObservation& o) {
  std::lock_guard<std::mutex> lock(mu_);
  Stage& s = StageLocked(o.stage);
  s.busy.End(o.end);
  s.micro_batches->Increment();
  if (!o.ok) s.errors->Increment();
  s.tokens->Increment(static_cast<double>(o.tokens));
  s.busy_seconds->Increment(Seconds(o.end - o.start));
  s.bytes_received->Increment(static_cast<double>(o.bytes_in));
  s.queued->Observe(Seconds(o.queued));
  if (o.executed) {
    s.forward->Observe(Seconds(o.forward));
    if (o.sampling > absl::ZeroDuration()) s.sampling->Observe(Seconds(o.sampling));
  }
  for (absl::Duration d : o.allreduce) s.allreduce->Observe(Seconds(d));
}

void WorkerMetrics::OnActivationsSent(int stage, absl::Duration duration, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  Stage& s = StageLocked(stage);
  s.transfer->Observe(Seconds(duration));
  s.bytes_sent->Increment(static_cast<double>(bytes));
}

void WorkerMetrics::Refresh(const WorkerGauges& g, absl::Time now) {
  if (g.stage < 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  Stage& s = StageLocked(g.stage);
  s.busy_fraction->Set(s.busy.Fraction(now));
  s.queue_depth->Set(static_cast<double>(g.queue_depth));
  s.sampling_states->Set(static_cast<double>(g.sampling_states));
  s.loaded->Set(g.loaded ? 1 : 0);
  s.weights_bytes->Set(static_cast<double>(g.weights_bytes));
  s.kv_cache_bytes->Set(static_cast<double>(g.kv_cache_bytes));
  const std::string key = absl::StrCat(g.stage, "/", g.first_layer, "/", g.last_layer, "/", g.backend);
  if (key != info_key_) {
    if (info_series_ != nullptr) info_->Remove(info_series_);
    info_series_ = &info_->Add({{"stage", absl::StrCat(g.stage)},
                                {"first_layer", absl::StrCat(g.first_layer)},
                                {"last_layer", absl::StrCat(g.last_layer)},
                                {"backend", g.backend}});
    info_series_->Set(1);
    info_key_ = key;
  }
}

}  // namespace spar
