#include "services/metrics/scheduler_metrics.h"

#include "absl/strings/str_cat.h"
#include "services/metrics/buckets.h"

namespace spar {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

const char* FinishedReasonLabel(SeqFinishReason reason) {
  switch (reason) {
    case SeqFinishReason::kStop:
      return "stop";
    case SeqFinishReason::kLength:
      return "length";
    case SeqFinishReason::kAborted:
      return "abort";
  }
  return "abort";
}

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

}  // namespace

SchedulerMetrics::SchedulerMetrics(prometheus::Registry* registry, std::string model_name,
                                   std::function<absl::Time()> clock)
    : model_name_(std::move(model_name)), clock_(std::move(clock)), registry_(registry) {
  const prometheus::Labels model = {{"model_name", model_name_}};
  running_ = &BuildGauge()
                  .Name("vllm:num_requests_running")
                  .Help("Sequences admitted and being generated (holding KV blocks)")
                  .Register(*registry)
                  .Add(model);
  waiting_ = &BuildGauge()
                  .Name("vllm:num_requests_waiting")
                  .Help("Sequences waiting for admission (queued or preempted)")
                  .Register(*registry)
                  .Add(model);
  kv_usage_ = &BuildGauge()
                   .Name("vllm:kv_cache_usage_perc")
                   .Help("Fraction of KV cache blocks in use, 0 to 1")
                   .Register(*registry)
                   .Add(model);
  cache_info_family_ = &BuildGauge()
                            .Name("vllm:cache_config_info")
                            .Help("KV cache configuration as labels (block_size in tokens, num_gpu_blocks, cache_dtype per stage, enable_prefix_caching); value 1")
                            .Register(*registry);
  preemptions_ = &BuildCounter()
                      .Name("vllm:num_preemptions_total")
                      .Help("Sequences preempted (KV blocks taken back; recomputed later)")
                      .Register(*registry)
                      .Add(model);
  prefix_cache_queries_ = &BuildCounter()
                               .Name("vllm:prefix_cache_queries_total")
                               .Help("Prefix cache queries, in tokens: the tokens of admitted sequences looked up")
                               .Register(*registry)
                               .Add(model);
  prefix_cache_hits_ = &BuildCounter()
                            .Name("vllm:prefix_cache_hits_total")
                            .Help("Prefix cache hits, in tokens: of the queried tokens, those shared from the cache")
                            .Register(*registry)
                            .Add(model);
  prompt_tokens_ = &BuildCounter()
                        .Name("vllm:prompt_tokens_total")
                        .Help("Prompt tokens of admitted requests")
                        .Register(*registry)
                        .Add(model);
  generation_tokens_ = &BuildCounter()
                            .Name("vllm:generation_tokens_total")
                            .Help("Output tokens generated")
                            .Register(*registry)
                            .Add(model);
  spec_drafts_ = &BuildCounter()
                      .Name("vllm:spec_decode_num_drafts_total")
                      .Help("Speculative decoding: verify steps of a sequence with drafts")
                      .Register(*registry)
                      .Add(model);
  spec_draft_tokens_ = &BuildCounter()
                            .Name("vllm:spec_decode_num_draft_tokens_total")
                            .Help("Speculative decoding: draft tokens verified")
                            .Register(*registry)
                            .Add(model);
  spec_accepted_tokens_ = &BuildCounter()
                               .Name("vllm:spec_decode_num_accepted_tokens_total")
                               .Help("Speculative decoding: draft tokens accepted")
                               .Register(*registry)
                               .Add(model);
  auto& per_pos = BuildCounter()
                      .Name("vllm:spec_decode_num_accepted_tokens_per_pos_total")
                      .Help("Speculative decoding: draft tokens accepted, by draft position (0 = the first)")
                      .Register(*registry);
  for (int p = 0; p < kMaxSpeculativeTokens; ++p) {
    spec_accepted_per_pos_.push_back(&per_pos.Add({{"model_name", model_name_}, {"position", absl::StrCat(p)}}));
  }
  success_family_ = &BuildCounter()
                         .Name("vllm:request_success_total")
                         .Help("Finished sequences by finish reason (stop, length, abort)")
                         .Register(*registry);
  for (const char* reason : {"stop", "length", "abort"}) {
    success_[reason] = &success_family_->Add({{"model_name", model_name_}, {"finished_reason", reason}});
  }
  ttft_ = &BuildHistogram()
               .Name("vllm:time_to_first_token_seconds")
               .Help("Time from a request's arrival to its first output token")
               .Register(*registry)
               .Add(model, metrics::TtftBuckets());
  itl_ = &BuildHistogram()
              .Name("vllm:inter_token_latency_seconds")
              .Help("Time between consecutive output tokens of a sequence")
              .Register(*registry)
              .Add(model, metrics::ItlBuckets());
  e2e_ = &BuildHistogram()
              .Name("vllm:e2e_request_latency_seconds")
              .Help("Time from a request's arrival to its last output (requests that completed)")
              .Register(*registry)
              .Add(model, metrics::RequestLatencyBuckets());
  queue_time_ = &BuildHistogram()
                     .Name("vllm:request_queue_time_seconds")
                     .Help("Time from a request's arrival to its first micro-batch")
                     .Register(*registry)
                     .Add(model, metrics::RequestLatencyBuckets());
  request_prompt_tokens_ = &BuildHistogram()
                                .Name("vllm:request_prompt_tokens")
                                .Help("Prompt tokens per completed request")
                                .Register(*registry)
                                .Add(model, metrics::TokenCountBuckets());
  request_generation_tokens_ = &BuildHistogram()
                                    .Name("vllm:request_generation_tokens")
                                    .Help("Output tokens per completed request (all its sequences)")
                                    .Register(*registry)
                                    .Add(model, metrics::TokenCountBuckets());

  errors_family_ = &BuildCounter()
                        .Name("spar_request_errors_total")
                        .Help("Requests refused or ended by an error, by gRPC status code")
                        .Register(*registry);
  // The codes a request can end with are created up front, so rate() and
  // alerts see a 0 before the first error rather than a missing series.
  for (absl::StatusCode code :
       {absl::StatusCode::kInvalidArgument, absl::StatusCode::kResourceExhausted, absl::StatusCode::kUnavailable,
        absl::StatusCode::kCancelled, absl::StatusCode::kDeadlineExceeded, absl::StatusCode::kInternal}) {
    ErrorCounterLocked(code);
  }
  active_requests_ = &BuildGauge()
                          .Name("spar_active_requests")
                          .Help("Requests with an open stream (admitted, not yet ended)")
                          .Register(*registry)
                          .Add({});
  in_flight_ = &BuildGauge()
                    .Name("spar_micro_batches_in_flight")
                    .Help("Micro-batches sent into the pipeline whose results have not come back")
                    .Register(*registry)
                    .Add({});
  micro_batches_ = &BuildCounter()
                        .Name("spar_micro_batches_total")
                        .Help("Micro-batches sent into the pipeline")
                        .Register(*registry)
                        .Add({});
  prefill_tokens_ = &BuildCounter()
                        .Name("spar_prefill_tokens_total")
                        .Help("Prompt tokens sent to the pipeline to compute (prefix-cache hits excluded, "
                              "recomputation after preemption included)")
                        .Register(*registry)
                        .Add({});
  prefix_cache_blocks_ = &BuildGauge()
                             .Name("spar_prefix_cache_blocks")
                             .Help("KV blocks holding reusable prompt content (held or evictable)")
                             .Register(*registry)
                             .Add({});
  stages_ = &BuildGauge()
                 .Name("spar_pipeline_stages")
                 .Help("Pipeline stages of the connected pipeline (0 until connected)")
                 .Register(*registry)
                 .Add({});
  pipeline_ready_ = &BuildGauge()
                         .Name("spar_pipeline_ready")
                         .Help("1 while every stage is connected, else 0")
                         .Register(*registry)
                         .Add({});
  draining_ = &BuildGauge()
                   .Name("spar_draining")
                   .Help("1 once a shutdown signal started the drain, else 0")
                   .Register(*registry)
                   .Add({});
}

prometheus::Counter& SchedulerMetrics::ErrorCounterLocked(absl::StatusCode code) {
  auto it = errors_.find(code);
  if (it == errors_.end()) {
    it = errors_.emplace(code, &errors_family_->Add({{"code", absl::StatusCodeToString(code)}})).first;
  }
  return *it->second;
}

void SchedulerMetrics::CountErrorLocked(absl::StatusCode code) { ErrorCounterLocked(code).Increment(); }

void SchedulerMetrics::Refresh(const SchedulerGauges& g) {
  std::lock_guard<std::mutex> lock(mu_);
  running_->Set(static_cast<double>(g.running));
  waiting_->Set(static_cast<double>(g.waiting));
  kv_usage_->Set(g.total_blocks > 0 ? static_cast<double>(g.used_blocks) / static_cast<double>(g.total_blocks) : 0.0);
  // The totals given are monotonic; count only their growth.
  auto grow = [](prometheus::Counter* c, uint64_t now, uint64_t* seen) {
    if (now > *seen) c->Increment(static_cast<double>(now - *seen));
    *seen = std::max(*seen, now);
  };
  grow(preemptions_, g.preemptions, &preemptions_seen_);
  grow(micro_batches_, g.micro_batches, &micro_batches_seen_);
  grow(prefill_tokens_, g.prefill_tokens, &prefill_tokens_seen_);
  grow(prefix_cache_queries_, g.prefix_cache_queries, &prefix_queries_seen_);
  grow(prefix_cache_hits_, g.prefix_cache_hits, &prefix_hits_seen_);
  prefix_cache_blocks_->Set(static_cast<double>(g.prefix_cache_blocks));
  grow(spec_drafts_, g.spec.drafts, &spec_seen_.drafts);
  grow(spec_draft_tokens_, g.spec.draft_tokens, &spec_seen_.draft_tokens);
  grow(spec_accepted_tokens_, g.spec.accepted_tokens, &spec_seen_.accepted_tokens);
  for (size_t p = 0; p < spec_accepted_per_pos_.size(); ++p) {
    grow(spec_accepted_per_pos_[p], g.spec.accepted_per_position[p], &spec_seen_.accepted_per_position[p]);
  }
  // The info series carries the configuration as labels: replace it when it
  // changes (known once the pipeline is connected).
  const std::string blocks = absl::StrCat(g.total_blocks);
  const std::string labels = absl::StrCat(blocks, " ", g.cache_dtype, " ", g.prefix_caching);
  if (g.total_blocks > 0 && labels != cache_info_labels_) {
    if (cache_info_ != nullptr) cache_info_family_->Remove(cache_info_);
    cache_info_ = &cache_info_family_->Add({{"model_name", model_name_},
                                            {"block_size", absl::StrCat(g.block_size)},
                                            {"num_gpu_blocks", blocks},
                                            {"cache_dtype", g.cache_dtype},
                                            {"enable_prefix_caching", g.prefix_caching ? "True" : "False"}});
    cache_info_->Set(1);
    cache_info_labels_ = labels;
  }
  active_requests_->Set(static_cast<double>(g.active_requests));
  in_flight_->Set(static_cast<double>(g.in_flight));
  stages_->Set(static_cast<double>(g.stages));
  pipeline_ready_->Set(g.pipeline_ready ? 1 : 0);
  draining_->Set(g.draining ? 1 : 0);
}

void SchedulerMetrics::OnAdmitted(const std::string& request_id, int prompt_tokens, int num_seqs) {
  const absl::Time now = clock_();
  std::lock_guard<std::mutex> lock(mu_);
  Timeline& t = requests_[request_id];
  t = Timeline();
  t.arrival = now;
  t.prompt_tokens = prompt_tokens;
  t.last_token.assign(std::max(num_seqs, 1), absl::InfinitePast());
  prompt_tokens_->Increment(prompt_tokens);
}

void SchedulerMetrics::OnRejected(absl::StatusCode code) {
  std::lock_guard<std::mutex> lock(mu_);
  CountErrorLocked(code);
}

void SchedulerMetrics::OnScheduled(const std::string& request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = requests_.find(request_id);
  if (it == requests_.end() || it->second.scheduled) return;
  it->second.scheduled = true;
  queue_time_->Observe(Seconds(clock_() - it->second.arrival));
}

void SchedulerMetrics::OnOutputToken(const std::string& request_id, int index) {
  const absl::Time now = clock_();
  std::lock_guard<std::mutex> lock(mu_);
  generation_tokens_->Increment();
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return;
  Timeline& t = it->second;
  ++t.generated;
  if (!t.first_token) {
    t.first_token = true;
    ttft_->Observe(Seconds(now - t.arrival));
  }
  if (index < 0 || index >= static_cast<int>(t.last_token.size())) return;
  if (t.last_token[index] != absl::InfinitePast()) itl_->Observe(Seconds(now - t.last_token[index]));
  t.last_token[index] = now;
}

void SchedulerMetrics::OnSequenceFinished(const std::string& request_id, int index, SeqFinishReason reason) {
  std::lock_guard<std::mutex> lock(mu_);
  success_.at(FinishedReasonLabel(reason))->Increment();
}

void SchedulerMetrics::OnRequestEnded(const std::string& request_id, const absl::Status& status) {
  const absl::Time now = clock_();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = requests_.find(request_id);
  if (status.ok()) {
    if (it != requests_.end()) {
      e2e_->Observe(Seconds(now - it->second.arrival));
      request_prompt_tokens_->Observe(it->second.prompt_tokens);
      request_generation_tokens_->Observe(static_cast<double>(it->second.generated));
    }
  } else {
    // An abort or a client that went away is a finish reason in vLLM's
    // terms; every error is also counted by its code.
    if (status.code() == absl::StatusCode::kCancelled) success_.at("abort")->Increment();
    CountErrorLocked(status.code());
  }
  if (it != requests_.end()) requests_.erase(it);
}

size_t SchedulerMetrics::tracked_requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_.size();
}

}  // namespace spar
