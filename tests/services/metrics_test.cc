// The metrics library without daemons: the busy window's arithmetic, the
// scheduler's request timings and counters under a fake clock, the worker's
// per-stage figures, and the HTTP port (/metrics, /health, /readyz) over a
// real socket. Values are read back from the rendered Prometheus text, the
// form a scraper sees.
#include <httplib.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "services/metrics/busy_window.h"
#include "services/metrics/metrics_http_server.h"
#include "services/metrics/scheduler_metrics.h"
#include "services/metrics/worker_metrics.h"

namespace spar {
namespace {

// The value of the sample whose line starts with `series ` (name and
// labels exactly as rendered); NaN when absent.
double Sample(const std::string& text, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, series + " ")) return std::stod(std::string(line.substr(series.size() + 1)));
  }
  return std::nan("");
}

TEST(BusyWindowTest, CountsTheOverlapWithTheTrailingWindow) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  BusyWindow w(absl::Seconds(10));
  EXPECT_EQ(w.Fraction(t0), 0.0);
  w.Begin(t0);
  w.End(t0 + absl::Seconds(2));
  // Only 4 s have passed since the first micro-batch: 2 of 4 busy.
  EXPECT_DOUBLE_EQ(w.Fraction(t0 + absl::Seconds(4)), 0.5);
  w.Begin(t0 + absl::Seconds(6));
  w.End(t0 + absl::Seconds(9));
  // Window [2, 12]: [6, 9] busy = 3 of 10 (the first interval ended at 2).
  EXPECT_DOUBLE_EQ(w.Fraction(t0 + absl::Seconds(12)), 0.3);
  // A micro-batch still running counts up to now: [6,9] + [11,13] in [3,13].
  w.Begin(t0 + absl::Seconds(11));
  EXPECT_DOUBLE_EQ(w.Fraction(t0 + absl::Seconds(13)), 0.5);
  w.End(t0 + absl::Seconds(13));
  // Long idle: nothing in the window.
  EXPECT_DOUBLE_EQ(w.Fraction(t0 + absl::Seconds(60)), 0.0);
}

class FakeClock {
 public:
  absl::Time Now() const { return now_; }
  void Advance(absl::Duration d) { now_ += d; }

 private:
  absl::Time now_ = absl::FromUnixSeconds(5000);
};

TEST(SchedulerMetricsTest, TimesARequestFromArrivalToLastToken) {
  FakeClock clock;
  prometheus::Registry registry;
  SchedulerMetrics m(&registry, "tiny", [&clock] { return clock.Now(); });
  m.OnAdmitted("r1", 12, 1);
  clock.Advance(absl::Milliseconds(250));
  m.OnScheduled("r1");
  clock.Advance(absl::Milliseconds(250));
  m.OnScheduled("r1");  // later micro-batches do not count again
  m.OnOutputToken("r1", 0);  // TTFT 0.5 s
  clock.Advance(absl::Milliseconds(100));
  m.OnOutputToken("r1", 0);
  clock.Advance(absl::Milliseconds(300));
  m.OnOutputToken("r1", 0);  // ITL 0.1 and 0.3
  m.OnSequenceFinished("r1", 0, SeqFinishReason::kLength);
  m.OnRequestEnded("r1", absl::OkStatus());  // e2e 0.9 s
  EXPECT_EQ(m.tracked_requests(), 0u);

  const std::string text = RenderPrometheusText(registry);
  const std::string model = "{model_name=\"tiny\"}";
  EXPECT_EQ(Sample(text, "vllm:time_to_first_token_seconds_count" + model), 1);
  EXPECT_DOUBLE_EQ(Sample(text, "vllm:time_to_first_token_seconds_sum" + model), 0.5);
  EXPECT_EQ(Sample(text, "vllm:time_to_first_token_seconds_bucket{model_name=\"tiny\",le=\"0.25\"}"), 0);
  EXPECT_EQ(Sample(text, "vllm:time_to_first_token_seconds_bucket{model_name=\"tiny\",le=\"0.5\"}"), 1);
  EXPECT_EQ(Sample(text, "vllm:inter_token_latency_seconds_count" + model), 2);
  EXPECT_NEAR(Sample(text, "vllm:inter_token_latency_seconds_sum" + model), 0.4, 1e-9);
  EXPECT_NEAR(Sample(text, "vllm:request_queue_time_seconds_sum" + model), 0.25, 1e-9);
  EXPECT_EQ(Sample(text, "vllm:request_queue_time_seconds_count" + model), 1);
  EXPECT_NEAR(Sample(text, "vllm:e2e_request_latency_seconds_sum" + model), 0.9, 1e-9);
  EXPECT_EQ(Sample(text, "vllm:prompt_tokens_total" + model), 12);
  EXPECT_EQ(Sample(text, "vllm:generation_tokens_total" + model), 3);
  EXPECT_EQ(Sample(text, "vllm:request_success_total{finished_reason=\"length\",model_name=\"tiny\"}"), 1);
  EXPECT_EQ(Sample(text, "vllm:request_success_total{finished_reason=\"stop\",model_name=\"tiny\"}"), 0);
  EXPECT_EQ(Sample(text, "vllm:request_generation_tokens_sum" + model), 3);
  EXPECT_EQ(Sample(text, "vllm:request_prompt_tokens_sum" + model), 12);
}

TEST(SchedulerMetricsTest, SequencesOfOneRequestHaveTheirOwnInterTokenClock) {
  FakeClock clock;
  prometheus::Registry registry;
  SchedulerMetrics m(&registry, "tiny", [&clock] { return clock.Now(); });
  m.OnAdmitted("r", 4, 2);
  clock.Advance(absl::Milliseconds(100));
  m.OnOutputToken("r", 0);
  clock.Advance(absl::Milliseconds(100));
  m.OnOutputToken("r", 1);  // the first token of sequence 1: no ITL
  clock.Advance(absl::Milliseconds(100));
  m.OnOutputToken("r", 0);  // 0.2 s after sequence 0's previous token
  m.OnSequenceFinished("r", 0, SeqFinishReason::kStop);
  m.OnSequenceFinished("r", 1, SeqFinishReason::kStop);
  m.OnRequestEnded("r", absl::OkStatus());
  const std::string text = RenderPrometheusText(registry);
  EXPECT_EQ(Sample(text, "vllm:inter_token_latency_seconds_count{model_name=\"tiny\"}"), 1);
  EXPECT_NEAR(Sample(text, "vllm:inter_token_latency_seconds_sum{model_name=\"tiny\"}"), 0.2, 1e-9);
  EXPECT_EQ(Sample(text, "vllm:time_to_first_token_seconds_count{model_name=\"tiny\"}"), 1);
  EXPECT_EQ(Sample(text, "vllm:request_success_total{finished_reason=\"stop\",model_name=\"tiny\"}"), 2);
}

TEST(SchedulerMetricsTest, CountsRejectionsAndErrorsByCodeAndAbortsAsFinishReason) {
  prometheus::Registry registry;
  SchedulerMetrics m(&registry, "tiny");
  std::string text = RenderPrometheusText(registry);
  // Present at 0 before the first error, so rate() and alerts work at once.
  EXPECT_EQ(Sample(text, "spar_request_errors_total{code=\"UNAVAILABLE\"}"), 0);
  m.OnRejected(absl::StatusCode::kResourceExhausted);
  m.OnRejected(absl::StatusCode::kResourceExhausted);
  m.OnRejected(absl::StatusCode::kUnavailable);
  m.OnAdmitted("a", 3, 1);
  m.OnRequestEnded("a", absl::CancelledError("the client went away"));
  m.OnAdmitted("b", 3, 1);
  m.OnRequestEnded("b", absl::DeadlineExceededError("deadline"));
  text = RenderPrometheusText(registry);
  EXPECT_EQ(Sample(text, "spar_request_errors_total{code=\"RESOURCE_EXHAUSTED\"}"), 2);
  EXPECT_EQ(Sample(text, "spar_request_errors_total{code=\"UNAVAILABLE\"}"), 1);
  EXPECT_EQ(Sample(text, "spar_request_errors_total{code=\"CANCELLED\"}"), 1);
  EXPECT_EQ(Sample(text, "spar_request_errors_total{code=\"DEADLINE_EXCEEDED\"}"), 1);
  EXPECT_EQ(Sample(text, "vllm:request_success_total{finished_reason=\"abort\",model_name=\"tiny\"}"), 1);
  // Failed requests are not in the latency histograms.
  EXPECT_EQ(Sample(text, "vllm:e2e_request_latency_seconds_count{model_name=\"tiny\"}"), 0);
  EXPECT_EQ(m.tracked_requests(), 0u);
}

TEST(SchedulerMetricsTest, RefreshSetsGaugesAndCountsOnlyCounterGrowth) {
  prometheus::Registry registry;
  SchedulerMetrics m(&registry, "tiny");
  SchedulerGauges g;
  g.running = 3;
  g.waiting = 5;
  g.used_blocks = 16;
  g.total_blocks = 64;
  g.preemptions = 7;
  g.micro_batches = 100;
  g.in_flight = 2;
  g.stages = 2;
  g.pipeline_ready = true;
  g.prefix_caching = true;
  g.cache_dtype = "bf16/fp8,bf16/fp8";
  g.prefix_cache_queries = 4136;
  g.prefix_cache_hits = 4096;
  g.prefix_cache_blocks = 64;
  g.prefill_tokens = 40;
  m.Refresh(g);
  std::string text = RenderPrometheusText(registry);
  EXPECT_EQ(Sample(text, "vllm:num_requests_running{model_name=\"tiny\"}"), 3);
  EXPECT_EQ(Sample(text, "vllm:num_requests_waiting{model_name=\"tiny\"}"), 5);
  EXPECT_DOUBLE_EQ(Sample(text, "vllm:kv_cache_usage_perc{model_name=\"tiny\"}"), 0.25);
  const std::string info = "vllm:cache_config_info{block_size=\"64\",cache_dtype=\"bf16/fp8,bf16/fp8\","
                           "enable_prefix_caching=\"True\",model_name=\"tiny\",num_gpu_blocks=";
  EXPECT_EQ(Sample(text, info + "\"64\"}"), 1);
  EXPECT_EQ(Sample(text, "vllm:num_preemptions_total{model_name=\"tiny\"}"), 7);
  EXPECT_EQ(Sample(text, "vllm:prefix_cache_queries_total{model_name=\"tiny\"}"), 4136);
  EXPECT_EQ(Sample(text, "vllm:prefix_cache_hits_total{model_name=\"tiny\"}"), 4096);
  EXPECT_EQ(Sample(text, "spar_prefix_cache_blocks"), 64);
  EXPECT_EQ(Sample(text, "spar_prefill_tokens_total"), 40);
  EXPECT_EQ(Sample(text, "spar_micro_batches_in_flight"), 2);
  EXPECT_EQ(Sample(text, "spar_pipeline_ready"), 1);
  // A reconnected pipeline (new core) restarts its counts from lower
  // values: the counter only grows by what is new.
  g.preemptions = 9;
  g.total_blocks = 32;
  g.pipeline_ready = false;
  g.draining = true;
  m.Refresh(g);
  text = RenderPrometheusText(registry);
  EXPECT_EQ(Sample(text, "vllm:num_preemptions_total{model_name=\"tiny\"}"), 9);
  EXPECT_EQ(Sample(text, info + "\"32\"}"), 1);
  EXPECT_TRUE(std::isnan(Sample(text, info + "\"64\"}")));
  EXPECT_EQ(Sample(text, "spar_draining"), 1);
  EXPECT_EQ(Sample(text, "spar_pipeline_ready"), 0);
}

TEST(SchedulerMetricsTest, SpeculativeDecodingCountersUnderVllmNames) {
  prometheus::Registry registry;
  SchedulerMetrics m(&registry, "tiny");
  std::string text = RenderPrometheusText(registry);
  // Exported from the start, at 0 (dashboards and docs name them).
  EXPECT_EQ(Sample(text, "vllm:spec_decode_num_drafts_total{model_name=\"tiny\"}"), 0);
  EXPECT_EQ(Sample(text, "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"tiny\",position=\"3\"}"), 0);
  SchedulerGauges g;
  g.spec.drafts = 10;
  g.spec.draft_tokens = 30;
  g.spec.accepted_tokens = 17;
  g.spec.accepted_per_position = {9, 6, 2, 0};
  m.Refresh(g);
  g.spec.drafts = 12;  // grows
  g.spec.accepted_per_position[0] = 11;
  m.Refresh(g);
  text = RenderPrometheusText(registry);
  EXPECT_EQ(Sample(text, "vllm:spec_decode_num_drafts_total{model_name=\"tiny\"}"), 12);
  EXPECT_EQ(Sample(text, "vllm:spec_decode_num_draft_tokens_total{model_name=\"tiny\"}"), 30);
  EXPECT_EQ(Sample(text, "vllm:spec_decode_num_accepted_tokens_total{model_name=\"tiny\"}"), 17);
  EXPECT_EQ(Sample(text, "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"tiny\",position=\"0\"}"), 11);
  EXPECT_EQ(Sample(text, "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"tiny\",position=\"1\"}"), 6);
}

TEST(WorkerMetricsTest, RecordsPerStageTimesBytesAndGauges) {
  prometheus::Registry registry;
  WorkerMetrics m(&registry, absl::Seconds(10));
  const absl::Time t0 = absl::FromUnixSeconds(100);
  MicroBatchObservation o;
  o.stage = 1;
  o.start = t0;
  o.end = t0 + absl::Milliseconds(40);
  o.queued = absl::Milliseconds(5);
  o.forward = absl::Milliseconds(30);
  o.sampling = absl::Milliseconds(10);
  o.tokens = 17;
  o.bytes_in = 4096;
  m.OnMicroBatchStart(1, o.start);
  m.OnMicroBatch(o);
  MicroBatchObservation failed = o;
  failed.start = t0 + absl::Milliseconds(100);
  failed.end = t0 + absl::Milliseconds(110);
  failed.ok = false;
  failed.executed = false;
  m.OnMicroBatchStart(1, failed.start);
  m.OnMicroBatch(failed);
  m.OnActivationsSent(1, absl::Milliseconds(2), 8192);
  WorkerGauges g;
  g.stage = 1;
  g.first_layer = 2;
  g.last_layer = 4;
  g.backend = "cpu";
  g.loaded = true;
  g.queue_depth = 3;
  m.Refresh(g, t0 + absl::Milliseconds(200));
  const std::string text = RenderPrometheusText(registry);
  EXPECT_EQ(Sample(text, "spar_stage_micro_batches_total{stage=\"1\"}"), 2);
  EXPECT_EQ(Sample(text, "spar_stage_errors_total{stage=\"1\"}"), 1);
  EXPECT_EQ(Sample(text, "spar_stage_tokens_total{stage=\"1\"}"), 34);
  EXPECT_EQ(Sample(text, "spar_stage_forward_seconds_count{stage=\"1\"}"), 1);  // the failed one did not run
  EXPECT_NEAR(Sample(text, "spar_stage_forward_seconds_sum{stage=\"1\"}"), 0.03, 1e-9);
  EXPECT_NEAR(Sample(text, "spar_stage_sampling_seconds_sum{stage=\"1\"}"), 0.01, 1e-9);
  EXPECT_NEAR(Sample(text, "spar_stage_busy_seconds_total{stage=\"1\"}"), 0.05, 1e-9);
  // 50 ms busy of the 200 ms since the first micro-batch.
  EXPECT_NEAR(Sample(text, "spar_stage_busy_fraction{stage=\"1\"}"), 0.25, 1e-9);
  EXPECT_EQ(Sample(text, "spar_activation_bytes_total{direction=\"received\",stage=\"1\"}"), 8192);
  EXPECT_EQ(Sample(text, "spar_activation_bytes_total{direction=\"sent\",stage=\"1\"}"), 8192);
  EXPECT_EQ(Sample(text, "spar_activation_transfer_seconds_count{stage=\"1\"}"), 1);
  EXPECT_EQ(Sample(text, "spar_nccl_allreduce_seconds_count{stage=\"1\"}"), 0);
  EXPECT_EQ(Sample(text, "spar_stage_queue_depth{stage=\"1\"}"), 3);
  EXPECT_EQ(Sample(text, "spar_gpu_memory_bytes{kind=\"weights\",stage=\"1\"}"), 0);
  EXPECT_EQ(Sample(text, "spar_stage_info{backend=\"cpu\",first_layer=\"2\",last_layer=\"4\",stage=\"1\"}"), 1);
}

TEST(MetricsHttpServerTest, ServesMetricsHealthAndReadinessOverHttp) {
  prometheus::Registry registry;
  auto& gauge = prometheus::BuildGauge().Name("spar_test_value").Help("test").Register(registry).Add({});
  int refreshes = 0;
  std::atomic<bool> ready{false};
  MetricsHttpServer::Options o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.refresh = [&] { gauge.Set(++refreshes); };
  o.readiness = [&]() -> absl::Status {
    return ready ? absl::OkStatus() : absl::UnavailableError("the shard is not loaded yet");
  };
  auto server = MetricsHttpServer::Start(&registry, o);
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", (*server)->port());
  client.set_read_timeout(5, 0);

  auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(metrics->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(Sample(metrics->body, "spar_test_value"), 1);  // refreshed before rendering
  EXPECT_EQ(Sample(client.Get("/metrics")->body, "spar_test_value"), 2);

  auto health = client.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto readyz = client.Get("/readyz");
  ASSERT_TRUE(readyz);
  EXPECT_EQ(readyz->status, 503);
  EXPECT_NE(readyz->body.find("the shard is not loaded yet"), std::string::npos);
  ready = true;
  EXPECT_EQ(client.Get("/readyz")->status, 200);
  EXPECT_EQ(client.Get("/nope")->status, 404);
  // A second server cannot take the same port: a clear error, no crash.
  MetricsHttpServer::Options same = o;
  same.port = (*server)->port();
  auto clash = MetricsHttpServer::Start(&registry, same);
  EXPECT_FALSE(clash.ok());
  EXPECT_NE(clash.status().message().find(absl::StrCat((*server)->port())), std::string::npos);
  (*server)->Stop();
  EXPECT_FALSE(client.Get("/health"));
}

}  // namespace
}  // namespace spar
