#include "services/worker/worker_main.h"

#include <atomic>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "engine/model.h"
#include "engine/model_config.h"
#include "engine/speculation_limits.h"
#include "services/common/args.h"
#include "services/common/cache_flags.h"
#include "services/common/daemon.h"
#include "services/common/layer_split.h"
#include "services/common/security_flags.h"
#include "services/metrics/metrics_port.h"
#include "services/metrics/worker_metrics.h"
#include "services/worker/worker_runtime.h"
#include "services/worker/worker_service.h"

namespace spar {

int RunWorkerMain(int argc, char** argv, int begin) {
  BlockShutdownSignals();
  std::string host = "0.0.0.0", port_file, model, layers, stage_layers, backend = "cpu";
  int64_t port = 50061, shutdown_timeout_s = 30, stage = -1, stages = 0, num_blocks = 256, tp_rank = 0, tp_size = 1;
  double delay_ms = 0, delay_token_us = 0, gpu_memory_utilization = 0;
  int64_t max_model_len = 0, device = -1;
  std::string tp_leader, tp_host;
  double tp_timeout_s = 60, tp_join_timeout_s = 30;
  ArgParser args("worker", "SPAR_");
  args.AddString("host", &host, "address to listen on (default 0.0.0.0)");
  args.AddInt("port", &port, "port to listen on (default 50061; 0 picks a free port)");
  args.AddString("port-file", &port_file, "write the port here once listening (for supervisors and tests)");
  args.AddString("model", &model, "model directory (config.json, safetensors); else named by the scheduler");
  args.AddString("layers", &layers, "decoder layers of this stage, FIRST:LAST (LAST exclusive)");
  args.AddInt("stage", &stage, "this stage's index, with --stages: an even split of the layers");
  args.AddInt("stages", &stages, "number of pipeline stages (with --stage)");
  args.AddString("stage-layers", &stage_layers,
                 "with --stage: every stage's layers, e.g. 0:40,40:78 instead of the even split (the scheduler's flag)");
  args.AddInt("num-blocks", &num_blocks, "KV cache blocks of 64 tokens (default 256)");
  args.AddDouble("gpu-memory-utilization", &gpu_memory_utilization,
                 "cuda: size the KV cache to this fraction of the GPU memory (0..1; 0 = use --num-blocks)");
  args.AddInt("max-model-len", &max_model_len, "longest sequence served, prompt + output (default: the model's)");
  args.AddString("backend", &backend, "cpu (default) or cuda");
  CacheDtypeFlags cache_flags;
  cache_flags.Register(&args);
  bool enforce_eager = false;
  args.AddBool("enforce-eager", &enforce_eager,
               "cuda: run decode steps op by op instead of replaying them as CUDA graphs");
  int64_t num_speculative_tokens = 0;
  args.AddInt("num-speculative-tokens", &num_speculative_tokens,
              "MTP speculative decoding: the last stage loads the model's MTP layer and verifies and proposes up to "
              "this many drafts per sequence and step (1-4; default 0 = off)");
  args.AddInt("device", &device, "cuda: the GPU of this process (default: --tp-rank)");
  args.AddInt("tp-rank", &tp_rank, "tensor-parallel rank inside the stage (0 = the stage leader, default)");
  args.AddInt("tp-size", &tp_size, "tensor-parallel size of the stage: worker processes, one per GPU (default 1)");
  args.AddString("tp-leader", &tp_leader, "ranks > 0: the stage leader's (rank 0's) worker address, HOST:PORT");
  args.AddString("tp-host", &tp_host,
                 "ranks > 0: the host the leader reaches this worker at (default: the address it calls from)");
  args.AddDouble("tp-timeout-s", &tp_timeout_s,
                 "cpu backend: the longest one all-reduce waits for the other ranks (default 60)");
  args.AddDouble("tp-join-timeout-s", &tp_join_timeout_s,
                 "how long a group formation waits for missing ranks (default 30)");
  args.AddDouble("delay-per-layer-ms", &delay_ms, "benchmarks: sleep this long per layer after each forward");
  args.AddDouble("delay-per-token-us", &delay_token_us, "benchmarks: and this long per layer and token");
  args.AddInt("shutdown-timeout", &shutdown_timeout_s,
              "on SIGTERM, keep executing until upstream is done with this stage, for up to this many seconds "
              "(default 30)");
  MetricsPortFlags metrics_flags;
  metrics_flags.Register(&args, 9401);
  WorkerPlaneOptions plane_options;
  AddWorkerPlaneFlags(&args, &plane_options);
  if (auto code = args.ParseOrExitCode(argc, argv, begin, "spar-worker: one pipeline stage of the spar runtime\n"))
    return *code;
  auto fail = [](const std::string& message) {
    std::cerr << "worker: " << message << "\n";
    return 2;
  };
  if (port < 0 || port > 65535) return fail("--port must be in [0, 65535]");
  if (num_blocks < 1) return fail("--num-blocks must be >= 1");
  if (!(gpu_memory_utilization >= 0 && gpu_memory_utilization <= 1)) {
    return fail("--gpu-memory-utilization must be in [0, 1]");
  }
  if (max_model_len < 0) return fail("--max-model-len must be >= 0");
  if (tp_size < 1 || tp_size > 64) return fail("--tp-size must be in [1, 64]");
  if (tp_rank < 0 || tp_rank >= tp_size) return fail("--tp-rank must be in [0, --tp-size)");
  if (tp_rank > 0 && tp_leader.empty()) return fail("--tp-rank > 0 needs --tp-leader HOST:PORT (rank 0's worker)");
  if (tp_rank > 0 && tp_leader.rfind(':') == std::string::npos) return fail("--tp-leader must be HOST:PORT");
  if (tp_rank == 0 && !tp_leader.empty()) return fail("--tp-leader is for ranks > 0 (this worker is the leader)");
  if (!(tp_timeout_s > 0) || !(tp_join_timeout_s > 0)) return fail("--tp-timeout-s and --tp-join-timeout-s must be > 0");
  if (device < -1) return fail("--device must be >= 0");
  if (delay_ms < 0 || delay_token_us < 0) return fail("--delay-per-layer-ms and --delay-per-token-us must be >= 0");
  if (shutdown_timeout_s < 0) return fail("--shutdown-timeout must be >= 0 seconds");
  if (num_speculative_tokens < 0 || num_speculative_tokens > kMaxSpeculativeTokens) {
    return fail(absl::StrCat("--num-speculative-tokens must be 0 (off) to ", kMaxSpeculativeTokens));
  }
  if (auto s = metrics_flags.Validate(); !s.ok()) return fail(std::string(s.message()));
  // A model this engine cannot serve is refused now, in one line, instead
  // of failing the shard's load after the worker started listening.
  std::optional<ModelConfig> config;
  if (!model.empty()) {
    auto loaded = LoadModelConfig(model + "/config.json");
    if (!loaded.ok()) return fail(std::string(loaded.status().message()));
    if (auto s = CheckEngineCanServe(*loaded); !s.ok()) return fail(absl::StrCat(model, "/config.json: ", s.message()));
    config = std::move(*loaded);
  }
  if (auto formats = cache_flags.Resolve(backend); !formats.ok()) return fail(std::string(formats.status().message()));
  // Before any channel or server exists: the next-stage link and the
  // listener read it.
  auto plane = WorkerPlane::Create(plane_options);
  if (!plane.ok()) return fail(std::string(plane.status().message()));
  SetProcessWorkerPlane(std::move(*plane));

  WorkerOptions options;
  options.stage.model_dir = model;
  options.stage.num_blocks = num_blocks;
  options.stage.gpu_memory_utilization = gpu_memory_utilization;
  options.stage.max_model_len = max_model_len;
  options.stage.backend = backend;
  options.stage.enforce_eager = enforce_eager;
  options.stage.num_speculative_tokens = static_cast<int>(num_speculative_tokens);
  options.stage.cache_dtypes = *cache_flags.Parse();
  options.stage.delay_per_layer = absl::Microseconds(static_cast<int64_t>(delay_ms * 1000));
  options.stage.delay_per_token = absl::Nanoseconds(static_cast<int64_t>(delay_token_us * 1000));
  options.stage.device = static_cast<int>(device >= 0 ? device : tp_rank);
  options.tp.rank = static_cast<int>(tp_rank);
  options.tp.size = static_cast<int>(tp_size);
  options.tp.leader = tp_leader;
  options.tp.peer_host = tp_host;
  options.host = host;
  options.tp.op_timeout = absl::Milliseconds(static_cast<int64_t>(tp_timeout_s * 1000));
  options.tp.join_timeout = absl::Milliseconds(static_cast<int64_t>(tp_join_timeout_s * 1000));
  if (!layers.empty()) {
    auto r = ParseLayerRange(layers);
    if (!r.ok()) return fail(std::string("--layers: ") + std::string(r.status().message()));
    options.stage.first_layer = r->first;
    options.stage.last_layer = r->last;
    options.preload = !model.empty();
  } else if (stages > 0) {
    if (model.empty()) return fail("--stage/--stages need --model (the split depends on the model's layers)");
    if (stage < 0 || stage >= stages) return fail("--stage must be in [0, --stages)");
    auto split = stage_layers.empty() ? SplitLayers(*config, static_cast<int>(stages))
                                      : ParseStageLayers(stage_layers, config->num_hidden_layers);
    if (!split.ok()) return fail(absl::StrCat(stage_layers.empty() ? "" : "--stage-layers: ", split.status().message()));
    if (static_cast<int64_t>(split->size()) != stages) {
      return fail(absl::StrCat("--stage-layers names ", split->size(), " stages, --stages ", stages));
    }
    options.stage.first_layer = (*split)[stage].first;
    options.stage.last_layer = (*split)[stage].last;
    options.stage_index = static_cast<int>(stage);
    options.preload = true;
  } else if (!model.empty()) {
    // A model but no range: the scheduler's Configure names the range.
    options.preload = false;
  }

  prometheus::Registry registry;
  WorkerMetrics metrics(&registry);
  options.metrics = &metrics;
  WorkerRuntime runtime(options);
  WorkerService service(&runtime);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  ConfigureWorkerServer(&builder);
  int selected_port = 0;
  builder.AddListeningPort(HostPort(host, static_cast<int>(port)), ProcessWorkerPlane().ServerCredentials(),
                           &selected_port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || selected_port == 0) {
    std::cerr << "worker: cannot listen on " << HostPort(host, static_cast<int>(port)) << "\n";
    return 1;
  }
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  // Not serving until the shard is loaded (readiness).
  health->SetServingStatus("", false);
  health->SetServingStatus("spar.v1.Worker", false);
  runtime.Start([health](bool ready) {
    health->SetServingStatus("", ready);
    health->SetServingStatus("spar.v1.Worker", ready);
  });
  std::atomic<bool> draining{false};
  auto metrics_server = StartMetricsPort(
      metrics_flags, &registry, [&] { metrics.Refresh(runtime.Gauges()); },
      [&]() -> absl::Status {
        if (draining) return absl::UnavailableError("draining (shutting down)");
        if (absl::Status s = runtime.fatal_error(); !s.ok()) return s;
        if (!runtime.Gauges().loaded) return absl::UnavailableError("the shard is not loaded yet");
        return absl::OkStatus();
      });
  if (!metrics_server.ok()) {
    std::cerr << "worker: " << metrics_server.status().message() << "\n";
    return 1;
  }
  if (*metrics_server) SPAR_LOG(INFO) << "metrics on http://" << HostPort(metrics_flags.host, (*metrics_server)->port()) << "/metrics";
  SPAR_LOG(INFO) << "spar-worker listening on " << HostPort(host, selected_port) << " ("
                 << ProcessWorkerPlane().Describe() << ")";
  // A peer joins its leader's group once it can be called back.
  runtime.StartTpJoin(selected_port);
  if (!port_file.empty()) {
    if (auto s = WritePortFile(port_file, selected_port); !s.ok()) {
      std::cerr << "worker: " << s.message() << "\n";
      return 1;
    }
  }
  int exit_code = 0;
  for (;;) {
    const int sig = WaitForShutdownSignal(absl::Milliseconds(200));
    if (sig != 0) {
      SPAR_LOG(INFO) << "signal " << sig << ": shutting down";
      break;
    }
    if (absl::Status s = runtime.fatal_error(); !s.ok()) {
      std::cerr << "worker: " << s.message() << "\n";
      exit_code = 1;
      break;
    }
  }
  // Drain: not ready, but keep executing until upstream (the scheduler, or
  // the previous stage) has closed its streams and nothing is queued, so the
  // scheduler's own drain can finish its requests through this stage.
  health->SetServingStatus("", false);
  health->SetServingStatus("spar.v1.Worker", false);
  draining = true;
  if (exit_code == 0) {
    const absl::Time drain_start = absl::Now();
    if (WaitForDrain([&] { return runtime.Idle(); }, absl::Seconds(shutdown_timeout_s))) {
      SPAR_LOG(INFO) << "drained in " << absl::FormatDuration(absl::Now() - drain_start);
    } else {
      SPAR_LOG(WARNING) << "drain stopped after " << absl::FormatDuration(absl::Now() - drain_start)
                        << " with upstream still connected or work queued";
    }
  }
  runtime.Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (*metrics_server) (*metrics_server)->Stop();
  return exit_code;
}

}  // namespace spar
