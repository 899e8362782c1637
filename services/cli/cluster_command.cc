// spar cluster --stages S --model DIR [--port P] [flags]
// Starts a local cluster on this machine: S spar-worker stages and a
// spar-scheduler, as child processes of this one (this binary re-executed
// as `spar worker` / `spar scheduler`), waits until it serves, then runs
// until SIGINT/SIGTERM or a child dies, and stops them all. Children also
// die with this process (parent-death signal), so nothing is left behind.
#include <stdlib.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/model_config.h"
#include "services/cli/commands.h"
#include "services/common/args.h"
#include "services/common/daemon.h"
#include "services/common/health_client.h"
#include "services/common/layer_split.h"
#include "services/common/subprocess.h"

namespace spar {
namespace {

std::string FormatDouble(double v) { return absl::StrCat(v); }

}  // namespace

int RunCluster(int argc, char** argv) {
  BlockShutdownSignals();
  std::string model, host = "127.0.0.1", port_file, log_dir, backend = "cpu";
  int64_t stages = 1, port = 50051, num_blocks = 256, max_in_flight = 0, max_batch_tokens = 512, max_queue = 256,
          ready_timeout_s = 600;
  double delay_ms = 0, delay_token_us = 0;
  ArgParser args("cluster");
  args.AddString("model", &model, "model directory (required)");
  args.AddInt("stages", &stages, "pipeline stages, one worker process each (default 1)");
  args.AddString("host", &host, "address every daemon listens on (default 127.0.0.1)");
  args.AddInt("port", &port, "the scheduler's public port (default 50051; 0 picks a free port)");
  args.AddString("port-file", &port_file, "write the scheduler's port here once it serves");
  args.AddString("log-dir", &log_dir, "daemon logs (default: a new directory under /tmp)");
  args.AddString("backend", &backend, "cpu (default) or cuda");
  args.AddInt("num-blocks", &num_blocks, "KV blocks per worker (default 256)");
  args.AddInt("max-in-flight", &max_in_flight, "micro-batches in flight (default 0: one per stage)");
  args.AddInt("max-batch-tokens", &max_batch_tokens, "tokens per micro-batch (default 512)");
  args.AddInt("max-queue", &max_queue, "waiting sequences before RESOURCE_EXHAUSTED (default 256)");
  args.AddDouble("delay-per-layer-ms", &delay_ms, "benchmarks: artificial per-layer delay in every worker");
  args.AddDouble("delay-per-token-us", &delay_token_us, "benchmarks: artificial per-layer, per-token delay");
  args.AddInt("ready-timeout-s", &ready_timeout_s, "give up if not serving after this long (default 600)");
  if (auto code = args.ParseOrExitCode(argc, argv, 2)) return *code;
  if (model.empty()) {
    std::cerr << "cluster: --model is required\n" << args.Usage();
    return 2;
  }
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
  const std::string self = SelfExePath();

  std::vector<std::unique_ptr<ChildProcess>> workers;
  std::vector<std::string> addresses;
  auto cleanup = [&] {
    workers.clear();  // destructors stop them
  };
  for (int i = 0; i < stages; ++i) {
    const LayerRange r = (*split)[i];
    std::vector<std::string> argv_w = {self, "worker", "--host", host, "--port", "0",
                                       "--port-file", absl::StrCat(run_dir, "/worker-", i, ".port"),
                                       "--model", model, "--layers", absl::StrCat(r.first, ":", r.last),
                                       "--num-blocks", absl::StrCat(num_blocks), "--backend", backend,
                                       "--delay-per-layer-ms", FormatDouble(delay_ms),
                                       "--delay-per-token-us", FormatDouble(delay_token_us)};
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
  std::vector<std::string> argv_s = {self, "scheduler", "--host", host, "--port", absl::StrCat(port),
                                     "--port-file", run_dir + "/scheduler.port", "--model", model,
                                     "--workers", absl::StrJoin(addresses, ","),
                                     "--max-in-flight", absl::StrCat(max_in_flight),
                                     "--max-batch-tokens", absl::StrCat(max_batch_tokens),
                                     "--max-queue", absl::StrCat(max_queue)};
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
  std::cout << "spar cluster: serving " << model << " at " << address << " (" << stages << " stage"
            << (stages > 1 ? "s" : "") << ": " << FormatStageLayers(*split) << "; logs in " << log_dir << ")"
            << std::endl;
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
  scheduler.reset();  // stop the scheduler first: it ends its streams cleanly
  cleanup();
  std::cout << "spar cluster: stopped" << std::endl;
  return code;
}

}  // namespace spar
