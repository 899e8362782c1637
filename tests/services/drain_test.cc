// Graceful drain with real processes (2 stage workers and a scheduler on
// 127.0.0.1): SIGTERM while a request streams lets it finish normally, new
// requests get UNAVAILABLE, readiness turns false on gRPC health and on
// /readyz, and every daemon exits 0; --shutdown-timeout bounds the wait.
// Workers given SIGTERM keep executing until their upstream is done.
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <thread>

#include <grpcpp/client_context.h>

#include "engine/make_tiny.h"
#include "gtest/gtest.h"
#include "services/common/daemon.h"
#include "services/common/health_client.h"
#include "spar/v1/generation.grpc.pb.h"
#include "tests/engine/shared_tiny_model.h"
#include "tests/services/test_cluster.h"

namespace spar {
namespace {

const std::string& TinyModel() { return testing::SharedTinyModel("drain_model", MakeTinyOptions{.seed = 5}); }

// A streamed request on its own thread; `tokens` counts as they arrive.
class BackgroundStream {
 public:
  BackgroundStream(const std::string& address, int max_tokens) {
    thread_ = std::thread([this, address, max_tokens] {
      auto stub = v1::Generation::NewStub(CreatePublicChannel(address));
      v1::GenerateRequest req;
      for (int32_t id : {5, 17, 29, 3, 11}) req.mutable_token_ids()->add_ids(id);
      req.mutable_sampling()->set_seed(1);
      req.mutable_stopping()->set_max_tokens(max_tokens);
      req.mutable_stopping()->set_ignore_eos(true);
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(120)));
      auto reader = stub->Generate(&ctx, req);
      v1::GenerateResponse resp;
      while (reader->Read(&resp)) {
        tokens += resp.output().token_ids_size();
        if (resp.output().has_finish()) finish_reason = resp.output().finish().reason();
      }
      status = reader->Finish();
      ended_at = absl::Now();
      done = true;
    });
  }
  ~BackgroundStream() { Join(); }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  bool WaitForTokens(int n, absl::Duration timeout) {
    const absl::Time until = absl::Now() + timeout;
    while (tokens < n && !done && absl::Now() < until) absl::SleepFor(absl::Milliseconds(5));
    return tokens >= n;
  }

  std::atomic<int> tokens{0};
  std::atomic<bool> done{false};
  v1::FinishReason finish_reason = v1::FINISH_REASON_UNSPECIFIED;
  grpc::Status status;
  absl::Time ended_at;

 private:
  std::thread thread_;
};

grpc::Status OneRequest(const std::string& address) {
  auto stub = v1::Generation::NewStub(CreatePublicChannel(address));
  v1::GenerateRequest req;
  for (int32_t id : {7, 8, 9}) req.mutable_token_ids()->add_ids(id);
  req.mutable_stopping()->set_max_tokens(2);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse resp;
  while (reader->Read(&resp)) {
  }
  return reader->Finish();
}

int HttpStatus(int port, const std::string& path) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(2, 0);
  client.set_read_timeout(2, 0);
  auto r = client.Get(path.c_str());
  return r ? r->status : -1;
}

// Waits for `child` to exit; returns its exit code, or -1 (still running
// after `timeout`, or killed by a signal).
int WaitExitCode(ChildProcess* child, absl::Duration timeout) {
  const absl::Time until = absl::Now() + timeout;
  while (child->Running()) {
    if (absl::Now() > until) return -1;
    absl::SleepFor(absl::Milliseconds(20));
  }
  const int st = child->wait_status();
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

testing::TestCluster::Options SlowCluster(std::vector<std::string> scheduler_flags) {
  // ~10 ms per layer and stage: a 40-token request streams for a second
  // or more, long enough to signal in the middle of it.
  return {.model = TinyModel(), .stages = 2, .num_blocks = 32, .delay_per_layer_ms = 10,
          .scheduler_flags = std::move(scheduler_flags)};
}

TEST(DrainTest, SigtermLetsTheRunningStreamFinishRefusesNewRequestsAndExitsZero) {
  auto cluster = testing::TestCluster::Start(SlowCluster({"--shutdown-timeout", "60"}), "drain_finish");
  ASSERT_NE(cluster, nullptr);
  const int metrics_port = cluster->scheduler_metrics_port();
  ASSERT_GT(metrics_port, 0);
  EXPECT_EQ(HttpStatus(metrics_port, "/readyz"), 200);
  EXPECT_TRUE(CheckHealth(cluster->address(), "").ok());

  BackgroundStream stream(cluster->address(), 40);
  ASSERT_TRUE(stream.WaitForTokens(3, absl::Seconds(30)));
  cluster->scheduler()->Signal(SIGTERM);

  // Readiness turns false on both probes while the stream goes on.
  const absl::Time until = absl::Now() + absl::Seconds(5);
  while (HttpStatus(metrics_port, "/readyz") != 503 && absl::Now() < until) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(HttpStatus(metrics_port, "/readyz"), 503);
  EXPECT_EQ(HttpStatus(metrics_port, "/health"), 200);  // alive, just not taking traffic
  EXPECT_EQ(CheckHealth(cluster->address(), "").code(), absl::StatusCode::kUnavailable);
  // A new request is refused, retryably.
  const grpc::Status refused = OneRequest(cluster->address());
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
  EXPECT_NE(refused.error_message().find("draining"), std::string::npos) << refused.error_message();
  EXPECT_FALSE(stream.done) << "the drain must not cut the running stream";

  stream.Join();
  EXPECT_TRUE(stream.status.ok()) << stream.status.error_message();
  EXPECT_EQ(stream.tokens, 40);
  EXPECT_EQ(stream.finish_reason, v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(WaitExitCode(cluster->scheduler(), absl::Seconds(20)), 0);
}

TEST(DrainTest, ShutdownTimeoutEndsWhatIsStillRunningWithUnavailable) {
  auto cluster = testing::TestCluster::Start(SlowCluster({"--shutdown-timeout", "1"}), "drain_timeout");
  ASSERT_NE(cluster, nullptr);
  BackgroundStream stream(cluster->address(), 1000);  // far longer than the timeout
  ASSERT_TRUE(stream.WaitForTokens(2, absl::Seconds(30)));
  const absl::Time signalled = absl::Now();
  cluster->scheduler()->Signal(SIGTERM);
  stream.Join();
  EXPECT_EQ(stream.status.error_code(), grpc::StatusCode::UNAVAILABLE) << stream.status.error_message();
  EXPECT_LT(stream.tokens, 1000);
  EXPECT_GE(stream.ended_at - signalled, absl::Milliseconds(900));
  EXPECT_LT(stream.ended_at - signalled, absl::Seconds(10));
  EXPECT_EQ(WaitExitCode(cluster->scheduler(), absl::Seconds(20)), 0);
}

TEST(DrainTest, WorkersKeepExecutingUntilTheirUpstreamIsDoneThenExitZero) {
  auto cluster = testing::TestCluster::Start(SlowCluster({"--shutdown-timeout", "60"}), "drain_workers");
  ASSERT_NE(cluster, nullptr);
  const int worker_metrics = cluster->worker_metrics_port(1);
  ASSERT_GT(worker_metrics, 0);
  EXPECT_EQ(HttpStatus(worker_metrics, "/readyz"), 200);
  BackgroundStream stream(cluster->address(), 40);
  ASSERT_TRUE(stream.WaitForTokens(3, absl::Seconds(30)));
  // As when Kubernetes deletes the whole group: every pod gets SIGTERM.
  cluster->worker(0)->Signal(SIGTERM);
  cluster->worker(1)->Signal(SIGTERM);
  const absl::Time until = absl::Now() + absl::Seconds(5);
  while (HttpStatus(worker_metrics, "/readyz") != 503 && absl::Now() < until) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(HttpStatus(worker_metrics, "/readyz"), 503);
  cluster->scheduler()->Signal(SIGTERM);
  stream.Join();
  EXPECT_TRUE(stream.status.ok()) << stream.status.error_message();
  EXPECT_EQ(stream.tokens, 40);
  EXPECT_EQ(WaitExitCode(cluster->scheduler(), absl::Seconds(20)), 0);
  EXPECT_EQ(WaitExitCode(cluster->worker(0), absl::Seconds(20)), 0);
  EXPECT_EQ(WaitExitCode(cluster->worker(1), absl::Seconds(20)), 0);
}

}  // namespace
}  // namespace spar
