#include "services/scheduler/scheduler_main.h"


#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/log.h"
#include "engine/model.h"
#include "services/common/args.h"
#include "services/common/cache_flags.h"
#include "services/common/daemon.h"
#include "services/common/layer_split.h"
#include "services/common/security_flags.h"
#include "services/metrics/metrics_port.h"
#include "services/metrics/scheduler_metrics.h"
#include "services/http/openai_server.h"
#include "services/scheduler/generation_service.h"
#include "services/scheduler/grpc_pipeline.h"
#include "services/scheduler/scheduler.h"
#include "services/scheduler/startup_checks.h"

namespace spar {
namespace {

SchedulerGauges GaugesOf(const LoadInfo& l, int stages) {
  SchedulerGauges g;
  g.running = static_cast<int64_t>(l.core.running);
  g.waiting = static_cast<int64_t>(l.core.waiting);
  g.active_requests = static_cast<int64_t>(l.active_requests);
  g.used_blocks = l.core.used_blocks;
  g.total_blocks = l.core.total_blocks;
  g.block_size = kCacheBlockTokens;
  g.preemptions = l.core.preemptions;
  g.spec = l.core.spec;
  g.micro_batches = l.core.micro_batches;
  g.prefill_tokens = l.core.prefill_tokens;
  g.prefix_caching = l.prefix_caching;
  g.prefix_cache_queries = l.core.prefix_cache.queries;
  g.prefix_cache_hits = l.core.prefix_cache.hits;
  g.prefix_cache_blocks = l.core.prefix_cache.cached_blocks;
  g.cache_dtype = l.cache_dtype;
  g.in_flight = static_cast<int64_t>(l.core.in_flight);
  g.stages = stages;
  g.pipeline_ready = l.ready;
  g.draining = l.draining;
  return g;
}

}  // namespace

int RunSchedulerMain(int argc, char** argv, int begin) {
  BlockShutdownSignals();
  std::string host = "0.0.0.0", port_file, model, workers, stage_layers, served_name, backend;
  int64_t port = 50051, shutdown_timeout_s = 30, num_blocks = 0, max_batch_tokens = 512, max_seqs = 256, max_running = 256,
          max_in_flight = 0, max_queue = 256, max_model_len = 0, connect_timeout_s = 600, step_timeout_s = 120;
  bool no_balance = false;
  std::string http_host, http_port_file, chat_template_path;
  int64_t http_port = 8000, max_body_bytes = 16 << 20, http_threads = 4, http_max_connections = 8192,
          http_header_timeout_s = 10, http_body_timeout_s = 60, http_idle_timeout_s = 30;
  ArgParser args("scheduler", "SPAR_");
  args.AddString("host", &host, "address to listen on (default 0.0.0.0)");
  args.AddInt("port", &port, "public gRPC port (default 50051; 0 picks a free port)");
  args.AddString("port-file", &port_file, "write the port here once listening (for supervisors and tests)");
  args.AddString("model", &model, "model directory: config.json and tokenizer.json (required)");
  args.AddString("workers", &workers, "stage leaders host:port,host:port,... stage 0 first (required)");
  args.AddString("stage-layers", &stage_layers, "layer ranges per stage, e.g. 0:40,40:78 (default: even split)");
  args.AddString("served-model-name", &served_name, "model name clients may send (default: the directory name)");
  args.AddString("backend", &backend, "backend the workers must run (default: any)");
  args.AddInt("num-blocks", &num_blocks, "KV blocks to use (default 0: the smallest worker cache)");
  args.AddInt("max-batch-tokens", &max_batch_tokens, "tokens per micro-batch: the chunked-prefill budget (default 512)");
  args.AddInt("max-seqs-per-batch", &max_seqs, "sequences per micro-batch (default 256)");
  args.AddInt("max-running", &max_running, "sequences admitted at once (default 256)");
  args.AddInt("max-in-flight", &max_in_flight, "micro-batches in the pipeline at once (default 0: one per stage)");
  args.AddInt("max-queue", &max_queue, "waiting sequences before new requests get RESOURCE_EXHAUSTED (default 256)");
  args.AddInt("max-model-len", &max_model_len, "context length per sequence (default 0: the model's)");
  args.AddInt("connect-timeout-s", &connect_timeout_s, "wait this long for the workers at start (default 600)");
  args.AddInt("step-timeout-s", &step_timeout_s, "a micro-batch not back after this long fails the pipeline (default 120)");
  args.AddBool("no-balance", &no_balance, "do not spread sequences evenly over the micro-batches in flight");
  int64_t num_speculative_tokens = 0;
  args.AddInt("num-speculative-tokens", &num_speculative_tokens,
              "MTP speculative decoding: drafts verified per sequence and step (1-4; default 0 = off); the last "
              "stage's worker must be started with at least as many");
  PrefixCachingFlags prefix_flags;
  prefix_flags.Register(&args);
  args.AddInt("shutdown-timeout", &shutdown_timeout_s,
              "on SIGTERM, let running requests finish for up to this many seconds, then abort them (default 30)");
  MetricsPortFlags metrics_flags;
  metrics_flags.Register(&args, 9400);
  PublicPlaneOptions public_options;
  AddPublicPlaneFlags(&args, &public_options);
  WorkerPlaneOptions plane_options;
  AddWorkerPlaneFlags(&args, &plane_options);
  args.AddInt("http-port", &http_port, "OpenAI-compatible HTTP port (default 8000; 0 picks a free port; -1: no HTTP)");
  args.AddString("http-host", &http_host, "address the HTTP API listens on (default: --host)");
  args.AddString("http-port-file", &http_port_file, "write the HTTP port here once listening");
  args.AddInt("max-body-bytes", &max_body_bytes,
              "largest HTTP request body, on the wire and once decompressed (default 16 MiB; larger: 413)");
  args.AddInt("http-threads", &http_threads,
              "HTTP I/O threads, serving any number of connections, and as many threads preparing requests "
              "(JSON, chat template, tokenizing) (default 4)");
  args.AddInt("http-max-connections", &http_max_connections,
              "open HTTP connections at most; more are answered 503 (default 8192; the open-file limit caps it)");
  args.AddInt("http-header-timeout-s", &http_header_timeout_s,
              "a request's header (and TLS handshake) must arrive within this many seconds (default 10)");
  args.AddInt("http-body-timeout-s", &http_body_timeout_s,
              "a request's body must arrive within this many seconds (default 60)");
  args.AddInt("http-idle-timeout-s", &http_idle_timeout_s,
              "close a kept-alive HTTP connection idle this many seconds (default 30)");
  std::string reasoning_parser = "auto", tool_call_parser = "auto";
  args.AddString("reasoning-parser", &reasoning_parser,
                 "chat: split <think> reasoning into reasoning_content: auto (by model), glm45, deepseek_v3, none");
  args.AddString("tool-call-parser", &tool_call_parser,
                 "chat: parse tool calls into tool_calls: auto (GLM-5: XML calls, DeepSeek-V3.2: DSML), glm47, glm45, deepseek_v32, none");
  args.AddString("chat-template", &chat_template_path,
                 "Jinja chat template file, or dsv32-encoding (default: the model's chat_template.jinja, tokenizer_config.json, or DeepSeek-V3.2's encoding)");
  if (auto code = args.ParseOrExitCode(argc, argv, begin, "spar-scheduler: batching and the public generation API of the spar runtime\n"))
    return *code;
  auto fail = [](const std::string& message) {
    std::cerr << "scheduler: " << message << "\n";
    return 2;
  };
  if (model.empty()) return fail("--model is required (its config.json and tokenizer.json)");
  if (workers.empty()) return fail("--workers is required (the stage leaders, stage 0 first)");
  if (port < 0 || port > 65535) return fail("--port must be in [0, 65535]");
  if (http_port < -1 || http_port > 65535) return fail("--http-port must be in [0, 65535], or -1 for no HTTP API");
  if (max_body_bytes < 1024 || http_threads < 1 || http_threads > 256) {
    return fail("--max-body-bytes must be >= 1024 and --http-threads in [1, 256]");
  }
  if (http_max_connections < 1 || http_header_timeout_s < 1 || http_body_timeout_s < 1 || http_idle_timeout_s < 1) {
    return fail("--http-max-connections and the --http-*-timeout-s flags must be >= 1");
  }
  if (max_batch_tokens < 1 || max_seqs < 1 || max_running < 1 || max_queue < 0 || max_in_flight < 0 ||
      num_blocks < 0 || max_model_len < 0 || connect_timeout_s < 1 || step_timeout_s < 1) {
    return fail("limits must be positive (--max-batch-tokens, --max-seqs-per-batch, --max-running, --max-queue, ...)");
  }
  if (shutdown_timeout_s < 0) return fail("--shutdown-timeout must be >= 0 seconds");
  if (num_speculative_tokens < 0 || num_speculative_tokens > kMaxSpeculativeTokens) {
    return fail(absl::StrCat("--num-speculative-tokens must be 0 (off) to ", kMaxSpeculativeTokens));
  }
  if (auto s = metrics_flags.Validate(); !s.ok()) return fail(std::string(s.message()));
  auto public_plane = PublicPlane::Create(public_options);
  if (!public_plane.ok()) return fail(std::string(public_plane.status().message()));
  // Before the pipeline makes its worker channels.
  auto worker_plane = WorkerPlane::Create(plane_options);
  if (!worker_plane.ok()) return fail(std::string(worker_plane.status().message()));
  SetProcessWorkerPlane(std::move(*worker_plane));
  auto config = LoadModelConfig(model + "/config.json");
  if (!config.ok()) return fail(std::string(config.status().message()));
  if (auto s = CheckEngineCanServe(*config); !s.ok()) return fail(absl::StrCat(model, "/config.json: ", s.message()));
  auto chat_parsers = http::ChatParsersFor(reasoning_parser, tool_call_parser, config->model_type);
  if (!chat_parsers.ok()) return fail(std::string(chat_parsers.status().message()));
  std::unique_ptr<Tokenizer> tokenizer;
  if (auto t = Tokenizer::FromFile(model + "/tokenizer.json"); t.ok()) {
    tokenizer = std::move(*t);
    if (auto s = CheckTokenizerFitsModel(*tokenizer, *config); !s.ok()) return fail(absl::StrCat(model, "/", s.message()));
  } else {
    SPAR_LOG(WARNING) << "no tokenizer (" << t.status().message() << "): token ids only";
  }
  // Both APIs render chat requests with it (gRPC chat inputs, /v1/chat/completions).
  auto chat_template = LoadCheckedChatTemplate(model, chat_template_path);
  if (!chat_template.ok()) return fail(std::string(chat_template.status().message()));
  if (*chat_template == nullptr) SPAR_LOG(WARNING) << "no chat template in " << model << ": chat requests are refused";

  GrpcPipelineOptions po;
  po.workers = absl::StrSplit(workers, ',', absl::SkipEmpty());
  po.model_path = model;
  po.num_blocks = num_blocks;
  po.backend = backend;
  if (!stage_layers.empty()) {
    auto ranges = ParseStageLayers(stage_layers, config->num_hidden_layers);
    if (!ranges.ok()) return fail(std::string("--stage-layers: ") + std::string(ranges.status().message()));
    po.stage_layers = *ranges;
  }
  SchedulerOptions so;
  so.model_path = model;
  if (served_name.empty()) served_name = DefaultServedModelName(model);
  so.served_model_name = served_name;
  so.limits.max_batch_tokens = max_batch_tokens;
  so.limits.max_seqs = static_cast<int>(max_seqs);
  so.limits.max_running = static_cast<int>(max_running);
  so.limits.num_speculative_tokens = static_cast<int>(num_speculative_tokens);
  so.max_in_flight = static_cast<int>(max_in_flight);
  so.max_waiting = static_cast<size_t>(max_queue);
  so.max_model_len = max_model_len;
  so.balance = !no_balance;
  so.enable_prefix_caching = prefix_flags.enabled();
  so.connect_timeout = absl::Seconds(connect_timeout_s);
  so.step_timeout = absl::Seconds(step_timeout_s);
  // Declared before the scheduler: it observes requests until the
  // scheduler is gone.
  prometheus::Registry registry;
  SchedulerMetrics metrics(&registry, served_name);
  so.observer = &metrics;
  const int num_stages = static_cast<int>(po.workers.size());
  Scheduler scheduler(so, *config, std::move(tokenizer), std::make_unique<GrpcPipeline>(po, *config));

  GenerationService service(&scheduler, &public_plane->api_keys(), chat_template->get());
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  ConfigurePublicServer(&builder);
  int selected_port = 0;
  builder.AddListeningPort(HostPort(host, static_cast<int>(port)), public_plane->ServerCredentials(), &selected_port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || selected_port == 0) {
    std::cerr << "scheduler: cannot listen on " << HostPort(host, static_cast<int>(port)) << "\n";
    return 1;
  }
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health->SetServingStatus("", false);
  health->SetServingStatus("spar.v1.Generation", false);
  SPAR_LOG(INFO) << "spar-scheduler listening on " << HostPort(host, selected_port) << " for " << po.workers.size()
                 << " stages (public API: " << public_plane->Describe()
                 << "; worker plane: " << ProcessWorkerPlane().Describe() << ")";
  if (!port_file.empty()) {
    if (auto s = WritePortFile(port_file, selected_port); !s.ok()) {
      std::cerr << "scheduler: " << s.message() << "\n";
      return 1;
    }
  }
  auto metrics_server = StartMetricsPort(
      metrics_flags, &registry, [&] { metrics.Refresh(GaugesOf(scheduler.Load(), num_stages)); },
      [&scheduler]() -> absl::Status {
        if (scheduler.draining()) return absl::UnavailableError("draining (shutting down)");
        if (!scheduler.ready()) return absl::UnavailableError("the pipeline of workers is not connected");
        return absl::OkStatus();
      });
  if (!metrics_server.ok()) {
    std::cerr << "scheduler: " << metrics_server.status().message() << "\n";
    return 1;
  }
  if (*metrics_server) SPAR_LOG(INFO) << "metrics on http://" << HostPort(metrics_flags.host, (*metrics_server)->port()) << "/metrics";
  std::unique_ptr<http::OpenAiHttpServer> http_server;
  if (http_port >= 0) {
    http::OpenAiServerOptions ho;
    ho.http.host = http_host.empty() ? host : http_host;
    ho.http.port = static_cast<int>(http_port);
    ho.http.tls = public_options.tls;  // --tls-cert/--tls-key/--tls-ca, as on gRPC
    ho.http.io_threads = ho.http.worker_threads = static_cast<int>(http_threads);
    ho.http.max_connections = static_cast<int>(http_max_connections);
    ho.http.max_body_bytes = static_cast<size_t>(max_body_bytes);
    ho.http.header_timeout = absl::Seconds(http_header_timeout_s);
    ho.http.body_timeout = absl::Seconds(http_body_timeout_s);
    ho.http.idle_timeout = absl::Seconds(http_idle_timeout_s);
    ho.api_keys = &public_plane->api_keys();  // --api-key / --api-key-file, as on gRPC
    ho.chat_parsers = *chat_parsers;
    http_server = std::make_unique<http::OpenAiHttpServer>(&scheduler, chat_template->get(), ho);
    auto bound = http_server->Start();
    if (!bound.ok()) {
      std::cerr << "scheduler: " << bound.status().message() << "\n";
      return 1;
    }
    SPAR_LOG(INFO) << "OpenAI-compatible HTTP API on " << (public_plane->tls() ? "https://" : "http://")
                   << HostPort(ho.http.host, *bound)
                   << (public_plane->api_keys().enabled() ? " (API key required)" : "");
    if (!http_port_file.empty()) {
      if (auto s = WritePortFile(http_port_file, *bound); !s.ok()) {
        std::cerr << "scheduler: " << s.message() << "\n";
        return 1;
      }
    }
  }
  // Connecting may take long (workers loading their shards): do it off the
  // main thread so a shutdown signal is still taken promptly.
  std::thread starter([&scheduler] {
    if (auto s = scheduler.Start(); !s.ok()) SPAR_LOG(WARNING) << "pipeline not connected yet: " << s;
  });
  bool serving = false;
  for (;;) {
    const int sig = WaitForShutdownSignal(absl::Milliseconds(100));
    if (sig != 0) {
      SPAR_LOG(INFO) << "signal " << sig << ": shutting down";
      break;
    }
    // Readiness follows the pipeline (lost and regained on failures).
    const bool ready = scheduler.ready();
    if (ready != serving) {
      health->SetServingStatus("", ready);
      health->SetServingStatus("spar.v1.Generation", ready);
      serving = ready;
    }
  }
  // Drain: not ready (gRPC health, /readyz), new requests refused with
  // UNAVAILABLE, running ones finish; past --shutdown-timeout (or at a
  // second signal) the rest are ended with UNAVAILABLE.
  health->SetServingStatus("", false);
  health->SetServingStatus("spar.v1.Generation", false);
  if (http_server) http_server->set_draining(true);  // new OpenAI requests: 503 "draining"
  scheduler.BeginDrain();
  const absl::Time drain_start = absl::Now();
  const bool drained = WaitForDrain([&] { return scheduler.Load().active_requests == 0; },
                                    absl::Seconds(shutdown_timeout_s));
  if (drained) {
    SPAR_LOG(INFO) << "drained in " << absl::FormatDuration(absl::Now() - drain_start);
  } else {
    SPAR_LOG(WARNING) << "drain stopped after " << absl::FormatDuration(absl::Now() - drain_start) << ": aborting "
                      << scheduler.Load().active_requests << " requests still running";
  }
  scheduler.Stop();  // also ends a connection attempt still in progress
  starter.join();
  if (http_server) http_server->Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (*metrics_server) (*metrics_server)->Stop();
  return 0;
}

}  // namespace spar
