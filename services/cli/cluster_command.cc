// spar cluster --stages S --model DIR [--port P] [--http-port H] [flags]
// Starts a local cluster on this machine: S spar-worker stages and a
// spar-scheduler, as child processes of this one (this binary re-executed
// as `spar worker` / `spar scheduler`), waits until it serves, then
// supervises them until SIGINT/SIGTERM, and stops them all. A daemon that
// dies while the cluster serves is started again with back-off
// (supervised_daemon.h) on the ports it had, so the scheduler reconnects to
// a returning worker and clients find a returning scheduler where it was;
// every restart is logged and counted (spar_cluster_*_restarts_total on the
// cluster's own metrics port). Children also die with this process
// (parent-death signal), so nothing is left behind. Every daemon gets a
// metrics port (/metrics, /health, /readyz): printed at start, and written
// as a Prometheus file_sd target list with --metrics-targets-file so a
// local Prometheus can scrape the cluster.
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/model_config.h"
#include "engine/speculation_limits.h"
#include "services/cli/commands.h"
#include "services/cli/supervised_daemon.h"
#include "services/common/args.h"
#include "services/common/cache_flags.h"
#include "services/common/daemon.h"
#include "services/common/health_client.h"
#include "services/common/layer_split.h"
#include "services/common/subprocess.h"
#include "services/metrics/cluster_metrics.h"
#include "services/metrics/metrics_http_server.h"

namespace spar {
namespace {

std::string FormatDouble(double v) { return absl::StrCat(v); }

// The metrics port flag of daemon `index` (0 = scheduler, 1 + i = worker i,
// 1 + stages = the cluster itself): consecutive ports from --metrics-port,
// or each picks a free one (0).
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

// Why the cluster is not ready (empty: every daemon runs), for its /readyz:
// written by the supervising thread, read by the metrics port's.
class ClusterReadiness {
 public:
  void Set(std::string reason) {
    std::lock_guard<std::mutex> lock(mu_);
    reason_ = std::move(reason);
  }
  absl::Status Get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return reason_.empty() ? absl::OkStatus() : absl::UnavailableError(reason_);
  }

 private:
  mutable std::mutex mu_;
  std::string reason_;
};

// The last line a daemon wrote to its log: at start-up, the one-line reason
// it refused to run.
std::string LastLogLine(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(std::max<std::streamoff>(0, size - 4096));
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  return last;
}

// Why `d` is not running (it exited before the cluster served), with its
// own last word.
std::string DeathOf(SupervisedDaemon& d) {
  const std::string said = LastLogLine(d.log_path());
  return absl::StrCat(d.role().Describe(), " ", d.child()->ExitDescription(), said.empty() ? "" : ": ", said,
                      " (log: ", d.log_path(), ")");
}

}  // namespace

int RunCluster(int argc, char** argv) {
  BlockShutdownSignals();
  std::string model, host = "127.0.0.1", port_file, log_dir, backend = "cpu", metrics_targets_file;
  std::string api_key, api_key_file, served_model_name;
  bool enforce_eager = false;
  int64_t metrics_port = 0, shutdown_timeout_s = 30, max_model_len = 0;
  std::string http_port_file;
  int64_t http_port = 8000;
  int64_t stages = 1, tp_size = 1, port = 50051, num_blocks = 256, max_in_flight = 0, max_batch_tokens = 512, max_queue = 256,
          ready_timeout_s = 600;
  double delay_ms = 0, delay_token_us = 0;
  int64_t num_speculative_tokens = 0;
  ArgParser args("cluster", "SPAR_");
  args.AddString("model", &model, "model directory (required)");
  args.AddInt("stages", &stages, "pipeline stages, one worker process each (default 1)");
  args.AddInt("tp-size", &tp_size,
              "worker processes per stage, a tensor-parallel group (default 1; cuda: rank r on GPU r)");
  args.AddString("host", &host, "address every daemon listens on (default 127.0.0.1)");
  args.AddInt("port", &port, "the scheduler's public port (default 50051; 0 picks a free port)");
  args.AddString("port-file", &port_file, "write the scheduler's port here once it serves");
  args.AddInt("http-port", &http_port, "the OpenAI-compatible HTTP port (default 8000; 0 picks a free port; -1: none)");
  args.AddString("http-port-file", &http_port_file, "write the HTTP port here once the cluster serves");
  args.AddString("served-model-name", &served_model_name,
                 "the model name clients send (default: the model directory's name)");
  args.AddInt("max-model-len", &max_model_len,
              "context length per sequence, on the scheduler and every worker (default 0: the model's)");
  args.AddString("api-key", &api_key,
                 "require this API key (comma-separated: any of them) on the scheduler's gRPC and HTTP APIs; "
                 "handed over in the scheduler's environment, not its command line");
  args.AddString("api-key-file", &api_key_file, "API keys, one per line, as the scheduler's --api-key-file");
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
              "the scheduler's metrics port; workers take the next ones, then the cluster's own "
              "(default 0: free ports; -1: off)");
  args.AddString("metrics-targets-file", &metrics_targets_file,
                 "write the metrics endpoints here as Prometheus file_sd JSON once serving");
  args.AddInt("shutdown-timeout", &shutdown_timeout_s,
              "on SIGINT/SIGTERM, let running requests finish for up to this many seconds (default 30)");
  CacheDtypeFlags cache_flags;  // to the workers
  cache_flags.Register(&args);
  PrefixCachingFlags prefix_flags;  // to the scheduler
  prefix_flags.Register(&args);
  if (auto code = args.ParseOrExitCode(argc, argv, 2)) return *code;
  if (model.empty()) {
    std::cerr << "cluster: --model is required\n" << args.Usage();
    return 2;
  }
  if (metrics_port < -1 || metrics_port + stages + 1 > 65535) {
    std::cerr << "cluster: --metrics-port must be -1 (off), 0 (free ports) or leave room for " << stages + 2
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
  if (max_model_len < 0) {
    std::cerr << "cluster: --max-model-len must be >= 0 (0: the model's)\n";
    return 2;
  }
  // The scheduler reads SPAR_API_KEY like --api-key; the environment keeps
  // the key out of its command line (which `ps` shows every user).
  if (!api_key.empty() && ::setenv("SPAR_API_KEY", api_key.c_str(), 1) != 0) {
    std::cerr << "cluster: cannot pass --api-key to the scheduler\n";
    return 1;
  }
  // Refused here rather than in a worker's log.
  if (auto formats = cache_flags.Resolve(backend); !formats.ok()) {
    std::cerr << "cluster: " << formats.status().message() << "\n";
    return 2;
  }
  const std::vector<std::string> cache_argv = cache_flags.PassThrough();
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
  if (served_model_name.empty()) served_model_name = DefaultServedModelName(model);

  // Flags every worker process gets, leaders and tensor-parallel peers.
  std::vector<std::string> worker_common = {"--model", model, "--num-blocks", absl::StrCat(num_blocks),
                                            "--backend", backend, "--delay-per-layer-ms", FormatDouble(delay_ms),
                                            "--delay-per-token-us", FormatDouble(delay_token_us),
                                            "--metrics-host", host, "--shutdown-timeout", shutdown_timeout,
                                            "--num-speculative-tokens", speculative};
  if (enforce_eager) worker_common.push_back("--enforce-eager");
  worker_common.insert(worker_common.end(), cache_argv.begin(), cache_argv.end());
  if (max_model_len > 0) worker_common.insert(worker_common.end(), {"--max-model-len", absl::StrCat(max_model_len)});

  // Leaders first (workers[i] is stage i's), then the peers.
  std::vector<std::unique_ptr<SupervisedDaemon>> workers;
  std::unique_ptr<SupervisedDaemon> scheduler;
  std::vector<std::string> addresses;
  auto stop_all = [&] {
    // The scheduler first: it drains its requests, then closes its
    // streams, and the workers (draining too) follow.
    if (scheduler) scheduler->Stop(stop_grace);
    for (auto& w : workers) w->Stop(stop_grace);
  };
  auto fail = [&](const std::string& message) {
    std::cerr << "cluster: " << message << "\n";
    stop_all();
    return 1;
  };
  const absl::Time start = absl::Now();
  for (int i = 0; i < stages; ++i) {
    const LayerRange r = (*split)[i];
    std::vector<std::string> argv_w = {self, "worker", "--host", host, "--port", "0",
                                       "--port-file", absl::StrCat(run_dir, "/worker-", i, ".port"),
                                       "--layers", absl::StrCat(r.first, ":", r.last),
                                       "--metrics-port", MetricsPortOf(metrics_port, 1 + i),
                                       "--metrics-port-file", absl::StrCat(run_dir, "/worker-", i, ".metrics-port")};
    argv_w.insert(argv_w.end(), worker_common.begin(), worker_common.end());
    // One GPU per process on one node: stage i's ranks on GPUs [i*T, (i+1)*T).
    argv_w.insert(argv_w.end(), {"--device", absl::StrCat(i * tp_size)});
    if (tp_size > 1) argv_w.insert(argv_w.end(), {"--tp-size", absl::StrCat(tp_size)});
    workers.push_back(std::make_unique<SupervisedDaemon>(DaemonRole::Worker(i, 0), std::move(argv_w),
                                                         absl::StrCat(log_dir, "/worker-", i, ".log")));
    if (auto s = workers.back()->Start(start); !s.ok()) return fail(std::string(s.message()));
  }
  for (int i = 0; i < stages; ++i) {
    auto p = WaitForPortFile(absl::StrCat(run_dir, "/worker-", i, ".port"), absl::Seconds(60), workers[i]->child());
    if (!p.ok() && !workers[i]->running()) return fail(DeathOf(*workers[i]));
    if (!p.ok()) return fail(absl::StrCat("worker ", i, ": ", p.status().message(), " (log: ", workers[i]->log_path(), ")"));
    addresses.push_back(HostPort(host, *p));
    // A restarted leader comes back on the same port: the scheduler and
    // the stage's peers know it there.
    workers[i]->SetFlag("port", absl::StrCat(*p));
  }
  // Tensor-parallel peers join their stage's leader (the address above);
  // the leader's Configure gives them their layers.
  for (int i = 0; i < stages; ++i) {
    for (int r = 1; r < tp_size; ++r) {
      const std::string name = absl::StrCat("worker-", i, ".tp", r);
      std::vector<std::string> argv_p = {self, "worker", "--host", host, "--port", "0",
                                         "--port-file", absl::StrCat(run_dir, "/", name, ".port"),
                                         "--tp-rank", absl::StrCat(r), "--tp-size", absl::StrCat(tp_size),
                                         "--tp-leader", addresses[i], "--device", absl::StrCat(i * tp_size + r),
                                         "--metrics-port", metrics_port < 0 ? "-1" : "0"};
      argv_p.insert(argv_p.end(), worker_common.begin(), worker_common.end());
      workers.push_back(std::make_unique<SupervisedDaemon>(DaemonRole::Worker(i, r), std::move(argv_p),
                                                           absl::StrCat(log_dir, "/", name, ".log")));
      if (auto s = workers.back()->Start(start); !s.ok()) return fail(std::string(s.message()));
    }
  }
  std::vector<std::string> argv_s = {self, "scheduler", "--host", host, "--port", absl::StrCat(port),
                                     "--port-file", run_dir + "/scheduler.port", "--model", model,
                                     "--workers", absl::StrJoin(addresses, ","),
                                     "--served-model-name", served_model_name,
                                     "--max-in-flight", absl::StrCat(max_in_flight),
                                     "--max-batch-tokens", absl::StrCat(max_batch_tokens),
                                     "--max-queue", absl::StrCat(max_queue),
                                     "--metrics-host", host, "--metrics-port", MetricsPortOf(metrics_port, 0),
                                     "--metrics-port-file", run_dir + "/scheduler.metrics-port",
                                     "--shutdown-timeout", shutdown_timeout,
                                     "--http-port", absl::StrCat(http_port),
                                     "--http-port-file", run_dir + "/http.port",
                                     "--num-speculative-tokens", speculative};
  for (const std::string& flag : prefix_flags.PassThrough()) argv_s.push_back(flag);
  if (max_model_len > 0) argv_s.insert(argv_s.end(), {"--max-model-len", absl::StrCat(max_model_len)});
  if (!api_key_file.empty()) argv_s.insert(argv_s.end(), {"--api-key-file", api_key_file});
  scheduler = std::make_unique<SupervisedDaemon>(DaemonRole::Scheduler(), std::move(argv_s), log_dir + "/scheduler.log");
  if (auto s = scheduler->Start(start); !s.ok()) return fail(std::string(s.message()));
  auto sp = WaitForPortFile(run_dir + "/scheduler.port", absl::Seconds(60), scheduler->child());
  absl::Status ready = sp.status();
  const std::string address = sp.ok() ? HostPort(host, *sp) : "";
  // Until the cluster serves, a daemon that dies fails the start: it would
  // fail the same way again (a bad flag, a model it refuses, a shard it
  // cannot load).
  auto first_death = [&]() -> absl::Status {
    if (!scheduler->running()) return absl::UnavailableError(DeathOf(*scheduler));
    for (auto& w : workers) {
      if (!w->running()) return absl::UnavailableError(DeathOf(*w));
    }
    return absl::OkStatus();
  };
  if (!sp.ok() && !scheduler->running()) ready = absl::UnavailableError(DeathOf(*scheduler));
  const absl::Time until = absl::Now() + absl::Seconds(ready_timeout_s);
  while (ready.ok() && !CheckHealth(address, "", absl::Seconds(1)).ok()) {
    ready = first_death();
    if (ready.ok() && absl::Now() > until) {
      ready = absl::DeadlineExceededError(absl::StrCat("the cluster did not become ready in time (logs in ", log_dir, ")"));
    }
    if (ready.ok() && WaitForShutdownSignal(absl::Milliseconds(100)) != 0) {
      stop_all();
      return 130;
    }
  }
  if (!ready.ok()) return fail(std::string(ready.message()));
  scheduler->SetFlag("port", absl::StrCat(*sp));
  if (!port_file.empty()) {
    if (auto s = WritePortFile(port_file, *sp); !s.ok()) std::cerr << "cluster: " << s.message() << "\n";
  }
  std::string http_line;
  if (http_port >= 0) {
    // The scheduler writes its HTTP port before it connects the pipeline.
    auto hp = WaitForPortFile(run_dir + "/http.port", absl::Seconds(10), scheduler->child());
    if (!hp.ok()) return fail(absl::StrCat("the scheduler's HTTP API: ", hp.status().message(), " (logs in ", log_dir, ")"));
    scheduler->SetFlag("http-port", absl::StrCat(*hp));
    http_line = absl::StrCat("; OpenAI API at http://", HostPort(host, *hp), "/v1");
    if (!http_port_file.empty()) {
      if (auto s = WritePortFile(http_port_file, *hp); !s.ok()) std::cerr << "cluster: " << s.message() << "\n";
    }
  }
  std::cout << "spar cluster: serving " << model << " as \"" << served_model_name << "\" at " << address << " ("
            << stages << " stage" << (stages > 1 ? "s" : "") << ": " << FormatStageLayers(*split)
            << (tp_size > 1 ? absl::StrCat(", ", tp_size, " tensor-parallel workers each") : std::string())
            << http_line << "; logs in " << log_dir << ")" << std::endl;

  prometheus::Registry registry;
  ClusterMetrics metrics(&registry);
  for (auto& w : workers) metrics.AddWorker(w->role().stage, w->role().rank);
  ClusterReadiness readiness;
  std::unique_ptr<MetricsHttpServer> metrics_server;
  if (metrics_port >= 0) {
    // The daemons wrote their metrics ports before their gRPC ports; a
    // restarted daemon keeps its port, so the targets stay valid.
    std::vector<std::string> groups, shown;
    auto add = [&](SupervisedDaemon* d, const std::string& port_path, const std::string& name, const std::string& job,
                   const std::string& label) {
      auto p = WaitForPortFile(port_path, absl::Seconds(5));
      if (!p.ok()) return;
      d->SetFlag("metrics-port", absl::StrCat(*p));
      const std::string a = HostPort(host, *p);
      groups.push_back(TargetGroup(a, job, label));
      shown.push_back(absl::StrCat(name, " http://", a, "/metrics"));
    };
    add(scheduler.get(), run_dir + "/scheduler.metrics-port", "scheduler", "spar-scheduler", "scheduler");
    for (int i = 0; i < stages; ++i) {
      add(workers[i].get(), absl::StrCat(run_dir, "/worker-", i, ".metrics-port"), absl::StrCat("stage ", i),
          "spar-worker", absl::StrCat("stage-", i));
    }
    MetricsHttpServer::Options mo;
    mo.host = host;
    mo.port = std::stoi(MetricsPortOf(metrics_port, 1 + static_cast<int>(stages)));
    mo.readiness = [&readiness] { return readiness.Get(); };
    auto server = MetricsHttpServer::Start(&registry, mo);
    if (!server.ok()) return fail(std::string(server.status().message()));
    metrics_server = std::move(*server);
    const std::string a = HostPort(host, metrics_server->port());
    groups.push_back(TargetGroup(a, "spar-cluster", "cluster"));
    shown.push_back(absl::StrCat("cluster http://", a, "/metrics"));
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

  // Supervise until a shutdown signal.
  std::vector<SupervisedDaemon*> daemons = {scheduler.get()};
  for (auto& w : workers) daemons.push_back(w.get());
  while (WaitForShutdownSignal(absl::Milliseconds(100)) == 0) {
    const absl::Time now = absl::Now();
    std::vector<std::string> down;
    for (SupervisedDaemon* d : daemons) {
      const DaemonRole& role = d->role();
      if (d->Poll(now, std::cerr) == SupervisedDaemon::Event::kRestarted) {
        role.scheduler() ? metrics.OnSchedulerRestart() : metrics.OnWorkerRestart(role.stage, role.rank);
      }
      const bool up = d->running();
      role.scheduler() ? metrics.SetSchedulerUp(up) : metrics.SetWorkerUp(role.stage, role.rank, up);
      if (!up) down.push_back(role.Describe());
    }
    readiness.Set(down.empty() ? "" : absl::StrCat("restarting ", absl::StrJoin(down, ", ")));
  }
  stop_all();
  if (metrics_server) metrics_server->Stop();
  std::cout << "spar cluster: stopped" << std::endl;
  return 0;
}

}  // namespace spar
