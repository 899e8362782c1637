// A real local cluster for multi-process tests: S spar-worker processes and
// a spar-scheduler on 127.0.0.1, ports picked by the daemons (port 0) and
// learnt through port files; every wait has a timeout and the children are
// stopped by the destructor (and die with the test process otherwise).
// Daemon logs are printed when the test failed.
#ifndef SPAR_TESTS_SERVICES_TEST_CLUSTER_H_
#define SPAR_TESTS_SERVICES_TEST_CLUSTER_H_

#include <signal.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "services/common/daemon.h"
#include "services/common/health_client.h"
#include "services/common/subprocess.h"
#include "tests/engine/test_util.h"

namespace spar::testing {

class TestCluster {
 public:
  struct Options {
    std::string model;
    int stages = 3;
    int64_t num_blocks = 64;
    double delay_per_layer_ms = 0;
    double delay_per_token_us = 0;
    std::vector<std::string> scheduler_flags;
    std::vector<std::string> worker_flags;  // appended to every worker's command line (TP peers too)
    // Wait for the scheduler's health to say SERVING (plaintext API only;
    // a test of a TLS API waits through its own channel).
    bool wait_for_serving = true;
    // Worker processes per stage: the stage leader (TP rank 0, whose address
    // the scheduler gets) and tp_size - 1 peers joining it.
    int tp_size = 1;
  };

  static std::unique_ptr<TestCluster> Start(const Options& options, const std::string& name) {
    auto c = std::unique_ptr<TestCluster>(new TestCluster());
    c->options_ = options;
    c->dir_ = TempDir(name);
    for (int i = 0; i < options.stages; ++i) {
      auto child = c->SpawnWorker(i, 0);
      if (child == nullptr) return nullptr;
      c->workers_.push_back(std::move(child));
    }
    for (int i = 0; i < options.stages; ++i) {
      auto port = WaitForPortFile(absl::StrCat(c->dir_, "/worker", i, ".port"), absl::Seconds(30), c->workers_[i].get());
      EXPECT_TRUE(port.ok()) << port.status();
      if (!port.ok()) return nullptr;
      c->worker_addresses_.push_back(absl::StrCat("127.0.0.1:", *port));
    }
    c->peers_.resize(options.stages);
    for (int i = 0; i < options.stages; ++i) {
      for (int r = 1; r < options.tp_size; ++r) {
        auto peer = c->SpawnPeer(i, r, 0);
        if (peer == nullptr) return nullptr;
        c->peers_[i].push_back(std::move(peer));
      }
    }
    for (int i = 0; i < options.stages; ++i) {
      for (int r = 1; r < options.tp_size; ++r) {
        auto port = WaitForPortFile(c->peer_port_file(i, r), absl::Seconds(30), c->peer(i, r));
        EXPECT_TRUE(port.ok()) << port.status();
        if (!port.ok()) return nullptr;
      }
    }
    if (!c->StartScheduler(options.scheduler_flags)) return nullptr;
    return c;
  }

  // Tensor-parallel peer `rank` (>= 1) of stage `i`: killed (SIGKILL), or
  // started again (a new process on a new port; it joins its leader).
  ChildProcess* peer(int i, int rank) { return peers_[i][rank - 1].get(); }
  void KillPeer(int i, int rank) {
    peer(i, rank)->Signal(SIGKILL);
    peer(i, rank)->Stop();
  }
  bool RestartPeer(int i, int rank) {
    peers_[i][rank - 1] = SpawnPeer(i, rank, 0);
    return peers_[i][rank - 1] != nullptr &&
           WaitForPortFile(peer_port_file(i, rank), absl::Seconds(30), peer(i, rank)).ok();
  }

  // Kills worker `i` (SIGKILL, no goodbye), or starts it again on its port.
  void KillWorker(int i) {
    workers_[i]->Signal(SIGKILL);
    workers_[i]->Stop();
  }
  bool RestartWorker(int i) {
    const std::string& address = worker_addresses_[i];
    const int port = std::stoi(address.substr(address.rfind(':') + 1));
    workers_[i] = SpawnWorker(i, port);
    return workers_[i] != nullptr &&
           WaitForPortFile(absl::StrCat(dir_, "/worker", i, ".port"), absl::Seconds(30), workers_[i].get()).ok();
  }

  // Stops the scheduler (if running) and starts a new one with `flags`; the
  // workers are reconfigured for a new epoch.
  bool StartScheduler(const std::vector<std::string>& flags) {
    scheduler_.reset();
    ++scheduler_runs_;
    const std::string port_file = absl::StrCat(dir_, "/scheduler", scheduler_runs_, ".port");
    const std::string http_port_file = absl::StrCat(dir_, "/scheduler", scheduler_runs_, ".http.port");
    std::vector<std::string> argv = {SPAR_SCHEDULER_BIN, "--host", "127.0.0.1", "--port", "0", "--port-file",
                                     port_file, "--http-port", "0", "--http-port-file", http_port_file,
                                     "--model", options_.model, "--workers",
                                     absl::StrJoin(worker_addresses_, ","), "--connect-timeout-s", "60",
                                     "--step-timeout-s", "60", "--metrics-port", "0", "--metrics-port-file",
                                     absl::StrCat(dir_, "/scheduler", scheduler_runs_, ".metrics-port")};
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto child = ChildProcess::Spawn(argv, {absl::StrCat(dir_, "/scheduler", scheduler_runs_, ".log")});
    EXPECT_TRUE(child.ok()) << child.status();
    if (!child.ok()) return false;
    scheduler_ = std::move(*child);
    auto port = WaitForPortFile(port_file, absl::Seconds(30), scheduler_.get());
    EXPECT_TRUE(port.ok()) << port.status();
    if (!port.ok()) return false;
    address_ = absl::StrCat("127.0.0.1:", *port);
    auto metrics_port =
        WaitForPortFile(absl::StrCat(dir_, "/scheduler", scheduler_runs_, ".metrics-port"), absl::Seconds(5));
    scheduler_metrics_port_ = metrics_port.ok() ? *metrics_port : -1;
    auto http_port = WaitForPortFile(http_port_file, absl::Seconds(30), scheduler_.get());
    EXPECT_TRUE(http_port.ok()) << http_port.status();
    if (!http_port.ok()) return false;
    http_address_ = absl::StrCat("127.0.0.1:", *http_port);
    if (!options_.wait_for_serving) return true;
    absl::Status ready = WaitForServing(address_, "", absl::Seconds(60));
    EXPECT_TRUE(ready.ok()) << ready;
    return ready.ok();
  }

  ~TestCluster() {
    scheduler_.reset();
    peers_.clear();
    workers_.clear();
    if (::testing::Test::HasFailure()) {
      std::vector<std::string> logs = {"scheduler1", "worker0", "worker1", "worker2"};
      for (int i = 0; i < options_.stages; ++i) {
        for (int r = 1; r < options_.tp_size; ++r) logs.push_back(absl::StrCat("worker", i, ".tp", r));
      }
      for (const std::string& log : logs) {
        std::ifstream in(absl::StrCat(dir_, "/", log, ".log"));
        if (!in) continue;
        std::stringstream ss;
        ss << in.rdbuf();
        std::string text = ss.str();
        if (text.size() > 4000) text = text.substr(text.size() - 4000);
        std::cerr << "----- " << log << ".log (tail) -----\n" << text << "\n";
      }
    }
  }

  // Kills the scheduler (SIGKILL, no goodbye); StartScheduler starts a new one.
  void KillScheduler() {
    scheduler_->Signal(SIGKILL);
    scheduler_->Stop();
  }
  // Log files of the daemons ("scheduler1", "worker0", ...).
  std::string log_path(const std::string& name) const { return absl::StrCat(dir_, "/", name, ".log"); }
  const std::string& dir() const { return dir_; }

  const std::string& address() const { return address_; }
  // The scheduler's metrics port (/metrics, /health, /readyz); -1 if unknown.
  int scheduler_metrics_port() const { return scheduler_metrics_port_; }
  // Worker i's metrics port; -1 if unknown.
  int worker_metrics_port(int i) const {
    auto p = WaitForPortFile(absl::StrCat(dir_, "/worker", i, ".metrics-port"), absl::Seconds(5));
    return p.ok() ? *p : -1;
  }
  ChildProcess* scheduler() { return scheduler_.get(); }
  // The scheduler's OpenAI-compatible HTTP API.
  const std::string& http_address() const { return http_address_; }
  const std::vector<std::string>& worker_addresses() const { return worker_addresses_; }
  ChildProcess* worker(int i) { return workers_[i].get(); }

 private:
  TestCluster() = default;

  std::unique_ptr<ChildProcess> SpawnWorker(int i, int port) {
    const std::string port_file = absl::StrCat(dir_, "/worker", i, ".port");
    std::remove(port_file.c_str());
    std::vector<std::string> argv = {
        SPAR_WORKER_BIN, "--host", "127.0.0.1", "--port", absl::StrCat(port), "--port-file", port_file, "--model",
        options_.model, "--stage", absl::StrCat(i), "--stages", absl::StrCat(options_.stages), "--num-blocks",
        absl::StrCat(options_.num_blocks), "--delay-per-layer-ms", absl::StrCat(options_.delay_per_layer_ms),
        "--delay-per-token-us", absl::StrCat(options_.delay_per_token_us), "--metrics-port", "0",
        "--metrics-port-file", absl::StrCat(dir_, "/worker", i, ".metrics-port")};
    if (options_.tp_size > 1) {
      argv.insert(argv.end(), {"--tp-size", absl::StrCat(options_.tp_size)});
    }
    argv.insert(argv.end(), options_.worker_flags.begin(), options_.worker_flags.end());
    auto child = ChildProcess::Spawn(argv, {absl::StrCat(dir_, "/worker", i, ".log")});
    EXPECT_TRUE(child.ok()) << child.status();
    return child.ok() ? std::move(*child) : nullptr;
  }

  std::string peer_port_file(int i, int rank) const { return absl::StrCat(dir_, "/worker", i, ".tp", rank, ".port"); }

  // A peer gets only what it needs of its own: the model directory (its
  // layers come from the leader's Configure), the leader's address.
  std::unique_ptr<ChildProcess> SpawnPeer(int i, int rank, int port) {
    const std::string port_file = peer_port_file(i, rank);
    std::remove(port_file.c_str());
    const std::string name = absl::StrCat("worker", i, ".tp", rank);
    std::vector<std::string> argv = {
        SPAR_WORKER_BIN, "--host", "127.0.0.1", "--port", absl::StrCat(port), "--port-file", port_file, "--model",
        options_.model, "--tp-rank", absl::StrCat(rank), "--tp-size", absl::StrCat(options_.tp_size),
        "--tp-leader", worker_addresses_[i], "--delay-per-layer-ms", absl::StrCat(options_.delay_per_layer_ms),
        "--delay-per-token-us", absl::StrCat(options_.delay_per_token_us), "--metrics-port", "0",
        "--metrics-port-file", absl::StrCat(dir_, "/", name, ".metrics-port")};
    argv.insert(argv.end(), options_.worker_flags.begin(), options_.worker_flags.end());
    auto child = ChildProcess::Spawn(argv, {absl::StrCat(dir_, "/", name, ".log")});
    EXPECT_TRUE(child.ok()) << child.status();
    return child.ok() ? std::move(*child) : nullptr;
  }

  Options options_;
  std::string dir_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
  std::vector<std::vector<std::unique_ptr<ChildProcess>>> peers_;  // [stage][rank - 1]
  std::vector<std::string> worker_addresses_;
  std::unique_ptr<ChildProcess> scheduler_;
  std::string address_;
  int scheduler_metrics_port_ = -1;
  std::string http_address_;
  int scheduler_runs_ = 0;
};

}  // namespace spar::testing

#endif  // SPAR_TESTS_SERVICES_TEST_CLUSTER_H_
