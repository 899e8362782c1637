// spar cluster --stages S --model DIR [--port P] [--http-port H] [flags]
// Starts a local cluster on this machine: S spar-worker stages and a
// spar-scheduler, as child processes of this one (this binary re-executed
// as `spar worker` / `spar scheduler`), waits until it serves, then runs
// until SIGINT/SIGTERM or a child dies, and stops them all. Children also
// die with this process (parent-death signal), so nothing is left behind.
// Every daemon gets a metrics port (/metrics, /health, /readyz): printed at
// start, and written as a Prometheus file_sd target list with
// --metrics-targets-file so a local Prometheus can scrape the cluster.
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/model_config.h"
#include "engine/speculation_limits.h"
#include "services/cli/commands.h"
#include "services/common/args.h"
#include "services/common/daemon.h"
#include "services/common/health_client.h"
#include "services/common/layer_split.h"
#include "services/common/subprocess.h"

namespace spar {
namespace {

std::string FormatDouble(double v) { return absl::StrCat(v); }

// The metrics port flag of daemon `index` (0 = scheduler, 1 + i = worker i):
// consecutive ports from --metrics-port, or each picks a free one (0).
std::string MetricsPortOf(int64_t base, int index) {
  if (base < 0) return "-1";
  if (base == 0) return "0";
  return absl::StrCat(base + index);
}

// A Prometheus file_sd_config target group (JSON): one per daemon, with
// its job and a `daemon` label ("scheduler", "stage-0", ...). Not "stage":
// worker series carry that label themselves.
std::string TargetGroup(const std::string& address, const std::string& job, const std::string& daemon) {
  return absl::StrCat("  {\"targets\": [\"", address, "\"], \"labels\": {\"job\": \"", job,
                      "\", \"daemon\": \"", daemon, "\"}}");
}

}  // namespace

int RunCluster(int argc, char** argv) {
  BlockShutdownSignals();
  std::string model, host = "127.0.0.1", port_file, log_dir, backend = "cpu", metrics_targets_file;
  bool enforce_eager = false;
  int64_t metrics_port = 0, shutdown_timeout_s = 30;
  std::string http_port_file;
  int64_t http_port = 8000;
  int64_t stages = 1, tp_size = 1, port = 50051, num_blocks = 256, max_in_flight = 0, max_batch_tokens = 512, max_queue = 256,
          ready_timeout_s = 600;
  double delay_ms = 0, delay_token_us = 0;
  int64_t num_speculative_tokens = 0;
  ArgParser args("cluster");
  args.AddString("model", &model, "model directory (required)");
  args.AddInt("stages", &stages, "pipeline stages, one worker process each (default 1)");
  args.AddInt("tp-size", &tp_size,
              "worker processes per stage, a tensor-parallel group (default 1; cuda: rank r on GPU r)");
  args.AddString("host", &host, "address every daemon listens on (default 127.0.0.1)");
  args.AddInt("port", &port, "the scheduler's public port (default 50051; 0 picks a free port)");
  args.AddString("port-file", &port_file, "write the scheduler's port here once it serves");
  args.AddInt("http-port", &http_port, "the OpenAI-compatible HTTP port (default 8000; 0 picks a free port; -1: none)");
  args.AddString("http-port-file", &http_port_file, "write the HTTP port here once the cluster serves");
  args.AddString("log-dir", &log_dir, "daemon logs (default: a new directory under /tmp)");
  args.AddString("backend", &backend, "cpu (default) or cuda");
  args.AddBool("enforce-eager", &enforce_eager, "cuda: no CUDA graphs for decode steps");
  args.AddInt("num-blocks", &num_blocks, "KV blocks per worker (default 256)");
  args.AddInt("max-in-flight", &max_in_flight, "micro-batches in flight (default 0: one per stage)");
  args.AddInt("max-batch-tokens", &max_batch_tokens, "tokens per micro-batch (default 512)");
  args.AddInt("max-queue", &max_queue, "waiting sequences before RESOURCE_EXHAUSTED (default 256)");
  args.AddInt("num-speculative-tokens", &num_speculative_tokens,
              "MTP speculative decoding, drafts per sequence and step, for the scheduler and the workers (1-4; "
              "default 0 = off)");
  args.AddDouble("delay-per-layer-ms", &delay_ms, "benchmarks: artificial per-layer delay in every worker");
  args.AddDouble("delay-per-token-us", &delay_token_us, "benchmarks: artificial per-layer, per-token delay");
  args.AddInt("ready-timeout-s", &ready_timeout_s, "give up if not serving after this long (default 600)");
  args.AddInt("metrics-port", &metrics_port,
              "the scheduler's metrics port; workers take the next ones (default 0: free ports; -1: off)");
  args.AddString("metrics-targets-file", &metrics_targets_file,
                 "write the metrics endpoints here as Prometheus file_sd JSON once serving");
  args.AddInt("shutdown-timeout", &shutdown_timeout_s,
              "on SIGINT/SIGTERM, let running requests finish for up to this many seconds (default 30)");
  if (auto code = args.ParseOrExitCode(argc, argv, 2)) return *code;
  if (model.empty()) {
    std::cerr << "cluster: --model is required\n" << args.Usage();
    return 2;
  }
  if (metrics_port < -1 || metrics_port + stages > 65535) {
    std::cerr << "cluster: --metrics-port must be -1 (off), 0 (free ports) or leave room for " << stages + 1
              << " consecutive ports below 65536\n";
    return 2;
  }
  if (shutdown_timeout_s < 0) {
    std::cerr << "cluster: --shutdown-timeout must be >= 0 seconds\n";
    return 2;
  }
  if (tp_size < 1 || tp_size > 64) {
    std::cerr << "cluster: --tp-size must be in [1, 64]\n";
    return 2;
  }
  if (num_speculative_tokens < 0 || num_speculative_tokens > kMaxSpeculativeTokens) {
    std::cerr << "cluster: --num-speculative-tokens must be 0 (off) to " << kMaxSpeculativeTokens << "\n";
    return 2;
  }
  const std::string speculative = absl::StrCat(num_speculative_tokens);
  const std::string shutdown_timeout = absl::StrCat(shutdown_timeout_s);
  // Children get SIGTERM and this long to drain before SIGKILL.
  const absl::Duration stop_grace = absl::Seconds(shutdown_timeout_s + 10);
  auto config = LoadModelConfig(model + "/config.json");
  if (!config.ok()) {
    std::cerr << "cluster: " << config.status().message() << "\n";
    return 1;
  }
  auto split = SplitLayers(*config, static_cast<int>(stages));
  if (!split.ok()) {
    std::cerr << "cluster: --stages: " << split.status().message() << "\n";
    return 2;
  }
  char tmpl[] = "/tmp/spar-cluster-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    std::cerr << "cluster: cannot create a temporary directory\n";
    return 1;
  }
  const std::string run_dir = tmpl;
  if (log_dir.empty()) log_dir = run_dir;
  std::error_code made;
  std::filesystem::create_directories(log_dir, made);  // a new --log-dir is created, as users expect
  if (made) {
    std::cerr << "cluster: --log-dir " << log_dir << ": " << made.message() << "\n";
    return 2;
  }
  const std::string self = SelfExePath();

  std::vector<std::unique_ptr<ChildProcess>> workers;
  std::vector<std::string> addresses;
  auto cleanup = [&] {
    for (auto& w : workers) w->Stop(stop_grace);
    workers.clear();
  };
  for (int i = 0; i < stages; ++i) {
    const LayerRange r = (*split)[i];
    std::vector<std::string> argv_w = {self, "worker", "--host", host, "--port", "0",
                                       "--port-file", absl::StrCat(run_dir, "/worker-", i, ".port"),
                                       "--model", model, "--layers", absl::StrCat(r.first, ":", r.last),
                                       "--num-blocks", absl::StrCat(num_blocks), "--backend", backend,
                                       "--delay-per-layer-ms", FormatDouble(delay_ms),
                                       "--delay-per-token-us", FormatDouble(delay_token_us),
                                       "--metrics-host", host, "--metrics-port", MetricsPortOf(metrics_port, 1 + i),
                                       "--metrics-port-file", absl::StrCat(run_dir, "/worker-", i, ".metrics-port"),
                                       "--shutdown-timeout", shutdown_timeout,
                                       "--num-speculative-tokens", speculative};
    // One GPU per process on one node: stage i's ranks on GPUs [i*T, (i+1)*T).
    argv_w.insert(argv_w.end(), {"--device", absl::StrCat(i * tp_size)});
    if (tp_size > 1) argv_w.insert(argv_w.end(), {"--tp-size", absl::StrCat(tp_size)});
    if (enforce_eager) argv_w.push_back("--enforce-eager");
    auto child = ChildProcess::Spawn(argv_w, {absl::StrCat(log_dir, "/worker-", i, ".log")});
    if (!child.ok()) {
      std::cerr << "cluster: " << child.status().message() << "\n";
      return 1;
    }
    workers.push_back(std::move(*child));
  }
  for (int i = 0; i < stages; ++i) {
    auto p = WaitForPortFile(absl::StrCat(run_dir, "/worker-", i, ".port"), absl::Seconds(60), workers[i].get());
    if (!p.ok()) {
      std::cerr << "cluster: worker " << i << ": " << p.status().message() << " (log: " << log_dir << "/worker-" << i
                << ".log)\n";
      cleanup();
      return 1;
    }
    addresses.push_back(HostPort(host, *p));
  }
  // Tensor-parallel peers join their stage's leader (the address above);
  // the leader's Configure gives them their layers.
  for (int i = 0; i < stages; ++i) {
    for (int r = 1; r < tp_size; ++r) {
      const std::string name = absl::StrCat("worker-", i, ".tp", r);
      std::vector<std::string> argv_p = {self, "worker", "--host", host, "--port", "0",
                                         "--port-file", absl::StrCat(run_dir, "/", name, ".port"),
                                         "--model", model, "--tp-rank", absl::StrCat(r),
                                         "--tp-size", absl::StrCat(tp_size), "--tp-leader", addresses[i],
                                         "--device", absl::StrCat(i * tp_size + r), "--num-blocks", absl::StrCat(num_blocks),
                                         "--backend", backend, "--delay-per-layer-ms", FormatDouble(delay_ms),
                                         "--delay-per-token-us", FormatDouble(delay_token_us),
                                         "--metrics-host", host, "--metrics-port", metrics_port < 0 ? "-1" : "0",
                                         "--shutdown-timeout", shutdown_timeout,
                                         "--num-speculative-tokens", speculative};
      if (enforce_eager) argv_p.push_back("--enforce-eager");
      auto child = ChildProcess::Spawn(argv_p, {absl::StrCat(log_dir, "/", name, ".log")});
      if (!child.ok()) {
        std::cerr << "cluster: " << child.status().message() << "\n";
        cleanup();
        return 1;
      }
      workers.push_back(std::move(*child));
    }
  }
  std::vector<std::string> argv_s = {self, "scheduler", "--host", host, "--port", absl::StrCat(port),
                                     "--port-file", run_dir + "/scheduler.port", "--model", model,
                                     "--workers", absl::StrJoin(addresses, ","),
                                     "--max-in-flight", absl::StrCat(max_in_flight),
                                     "--max-batch-tokens", absl::StrCat(max_batch_tokens),
                                     "--max-queue", absl::StrCat(max_queue),
                                     "--metrics-host", host, "--metrics-port", MetricsPortOf(metrics_port, 0),
                                     "--metrics-port-file", run_dir + "/scheduler.metrics-port",
                                     "--shutdown-timeout", shutdown_timeout,
                                     "--http-port", absl::StrCat(http_port),
                                     "--http-port-file", run_dir + "/http.port",
                                     "--num-speculative-tokens", speculative};
  auto sched = ChildProcess::Spawn(argv_s, {log_dir + "/scheduler.log"});
  if (!sched.ok()) {
    std::cerr << "cluster: " << sched.status().message() << "\n";
    cleanup();
    return 1;
  }
  std::unique_ptr<ChildProcess> scheduler = std::move(*sched);
  auto sp = WaitForPortFile(run_dir + "/scheduler.port", absl::Seconds(60), scheduler.get());
  absl::Status ready = sp.status();
  const std::string address = sp.ok() ? HostPort(host, *sp) : "";
  const absl::Time until = absl::Now() + absl::Seconds(ready_timeout_s);
  while (ready.ok()) {
    ready = CheckHealth(address, "", absl::Seconds(1));
    if (ready.ok()) break;
    if (!scheduler->Running()) {
      ready = absl::UnavailableError(absl::StrCat("the scheduler ", scheduler->ExitDescription()));
      break;
    }
    if (absl::Now() > until) {
      ready = absl::DeadlineExceededError("the cluster did not become ready in time");
      break;
    }
    if (WaitForShutdownSignal(absl::Milliseconds(100)) != 0) {
      scheduler.reset();
      cleanup();
      return 130;
    }
    ready = absl::OkStatus();
  }
  if (!ready.ok()) {
    std::cerr << "cluster: " << ready.message() << " (logs in " << log_dir << ")\n";
    scheduler.reset();
    cleanup();
    return 1;
  }
  if (!port_file.empty()) {
    if (auto s = WritePortFile(port_file, *sp); !s.ok()) std::cerr << "cluster: " << s.message() << "\n";
  }
  std::string http_line;
  if (http_port >= 0) {
    // The scheduler writes its HTTP port before it connects the pipeline.
    auto hp = WaitForPortFile(run_dir + "/http.port", absl::Seconds(10), scheduler.get());
    if (!hp.ok()) {
      std::cerr << "cluster: the scheduler's HTTP API: " << hp.status().message() << " (logs in " << log_dir << ")\n";
      scheduler.reset();
      cleanup();
      return 1;
    }
    http_line = absl::StrCat("; OpenAI API at http://", HostPort(host, *hp), "/v1");
    if (!http_port_file.empty()) {
      if (auto s = WritePortFile(http_port_file, *hp); !s.ok()) std::cerr << "cluster: " << s.message() << "\n";
    }
  }
  std::cout << "spar cluster: serving " << model << " at " << address << " (" << stages << " stage"
            << (stages > 1 ? "s" : "") << ": " << FormatStageLayers(*split)
            << (tp_size > 1 ? absl::StrCat(", ", tp_size, " tensor-parallel workers each") : std::string())
            << http_line << "; logs in " << log_dir
            << ")" << std::endl;
  if (metrics_port >= 0) {
    // The daemons wrote their metrics ports before their gRPC ports.
    std::vector<std::string> groups, shown;
    auto add = [&](const std::string& port_path, const std::string& name, const std::string& job,
                   const std::string& stage) {
      auto p = WaitForPortFile(port_path, absl::Seconds(5));
      if (!p.ok()) return;
      const std::string a = HostPort(host, *p);
      groups.push_back(TargetGroup(a, job, stage));
      shown.push_back(absl::StrCat(name, " http://", a, "/metrics"));
    };
    add(run_dir + "/scheduler.metrics-port", "scheduler", "spar-scheduler", "scheduler");
    for (int i = 0; i < stages; ++i) {
      add(absl::StrCat(run_dir, "/worker-", i, ".metrics-port"), absl::StrCat("stage ", i), "spar-worker",
          absl::StrCat("stage-", i));
    }
    std::cout << "spar cluster: metrics " << absl::StrJoin(shown, ", ") << std::endl;
    if (!metrics_targets_file.empty()) {
      const std::string tmp = metrics_targets_file + ".tmp";
      if (FILE* f = std::fopen(tmp.c_str(), "w")) {
        std::fprintf(f, "[\n%s\n]\n", absl::StrJoin(groups, ",\n").c_str());
        std::fclose(f);
        std::rename(tmp.c_str(), metrics_targets_file.c_str());
      } else {
        std::cerr << "cluster: cannot write " << metrics_targets_file << "\n";
      }
    }
  }
  int code = 0;
  for (;;) {
    if (WaitForShutdownSignal(absl::Milliseconds(200)) != 0) break;
    bool dead = !scheduler->Running();
    for (auto& w : workers) dead = dead || !w->Running();
    if (dead) {
      std::cerr << "cluster: a daemon exited; stopping (logs in " << log_dir << ")\n";
      code = 1;
      break;
    }
  }
  // Stop the scheduler first: it drains its requests, then closes its
  // streams, and the workers (draining too) follow.
  scheduler->Stop(stop_grace);
  scheduler.reset();
  cleanup();
  std::cout << "spar cluster: stopped" << std::endl;
  return code;
}

}  // namespace spar
