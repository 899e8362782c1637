// Faults with real processes on 127.0.0.1 (a spar-scheduler and three
// spar-worker stages, cpu backend, make-tiny GLM-5): a stage killed or
// frozen mid-stream, a stage too slow for the step timeout, clients that
// disconnect, the scheduler itself killed. Each test checks the promise the
// runtime makes (services/README.md "Faults"): affected requests end
// promptly with UNAVAILABLE (or their deadline), never hang and never carry
// a wrong token; the scheduler stays up, reports not-ready and recovers;
// freed KV blocks are freed at once; later requests are exactly right.
#include <httplib.h>
#include <signal.h>

#include <atomic>
#include <cmath>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"
#include "services/common/daemon.h"
#include "services/common/health_client.h"
#include "tests/reliability/grpc_client_util.h"
#include "tests/services/mixed_requests.h"
#include "tests/services/metrics_scrape.h"
#include "tests/services/test_cluster.h"

namespace spar {
namespace {

using testing::ReliabilityModel;

// Seeded requests long enough (64 tokens, slowed stages) to be mid-stream
// when the fault hits, each with a known right answer.
std::vector<GenerationRequest> LongRequests(int count) {
  std::vector<GenerationRequest> out;
  for (int i = 0; i < count; ++i) {
    GenerationRequest r;
    for (int t = 0; t < 5 + 3 * i; ++t) r.prompt.push_back(static_cast<int32_t>((i * 31 + t * 7) % 280));
    r.sampling.temperature = i % 2 == 0 ? 0.0f : 0.9f;
    r.seed = 500 + i;
    r.max_tokens = 64;
    r.ignore_eos = true;
    out.push_back(std::move(r));
  }
  return out;
}

struct Fleet {
  std::vector<testing::StreamRecord> records;
  std::vector<std::thread> threads;
  std::atomic<int> started{0};
};

// Starts one streaming client per request; returns once each has its first
// message (or `timeout` passed).
void StartStreams(v1::Generation::Stub* stub, const std::vector<GenerationRequest>& requests, Fleet* fleet,
                  absl::Duration deadline, const std::string& prefix) {
  fleet->records.resize(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    fleet->threads.emplace_back([stub, &requests, fleet, deadline, prefix, i] {
      grpc::ClientContext ctx;
      fleet->records[i] = testing::StreamCall(stub, testing::ToWire(requests[i], absl::StrCat(prefix, i)), deadline,
                                              &ctx, [fleet] { fleet->started++; });
    });
  }
  const absl::Time until = absl::Now() + testing::Scaled(absl::Seconds(30));
  while (fleet->started < static_cast<int>(requests.size()) && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(fleet->started.load(), static_cast<int>(requests.size())) << "streams did not start";
}

void Join(Fleet* fleet) {
  for (auto& t : fleet->threads) t.join();
  fleet->threads.clear();
}

// Waits until the scheduler's health is NOT_SERVING (true) or timeout.
bool WaitNotServing(const std::string& address, absl::Duration timeout) {
  const absl::Time until = absl::Now() + timeout;
  while (absl::Now() < until) {
    if (!CheckHealth(address, "").ok()) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

// The value of the first sample of `name` on the scheduler's /metrics
// (NaN when absent).
double SchedulerMetric(testing::TestCluster* cluster, const std::string& name) {
  return testing::ScrapeMetric(cluster->scheduler_metrics_port(), name);
}

// Runs `requests` and checks every output equals the engine's.
void ExpectExact(v1::Generation::Stub* stub, const std::vector<GenerationRequest>& requests,
                 const std::vector<Generation>& want, const std::string& prefix) {
  Fleet fleet;
  fleet.records.resize(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    fleet.threads.emplace_back([&, i] {
      fleet.records[i] = testing::Stream(stub, testing::ToWire(requests[i], absl::StrCat(prefix, i)),
                                         testing::Scaled(absl::Seconds(60)));
    });
  }
  Join(&fleet);
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(fleet.records[i].status.ok()) << prefix << i << ": " << fleet.records[i].status.error_message();
    EXPECT_EQ(fleet.records[i].ids, testing::Ids(want[i])) << prefix << i;
  }
}

TEST(FaultTest, WorkerKilledMidStreamEndsEveryStreamPromptlyWithRightTokensThenRecovers) {
  const auto requests = LongRequests(8);
  const auto want = testing::EngineReference(ReliabilityModel(), requests);
  ASSERT_EQ(want.size(), requests.size());
  auto cluster = testing::TestCluster::Start(
      {.model = ReliabilityModel(), .stages = 3, .num_blocks = 64, .delay_per_layer_ms = 15}, "fault_kill");
  ASSERT_NE(cluster, nullptr);
  auto stub = v1::Generation::NewStub(CreatePublicChannel(cluster->address()));

  Fleet fleet;
  StartStreams(stub.get(), requests, &fleet, testing::Scaled(absl::Seconds(60)), "kill-");
  cluster->KillWorker(1);
  const absl::Time killed = absl::Now();
  Join(&fleet);
  absl::Duration slowest;
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto& r = fleet.records[i];
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE) << i << ": " << r.status.error_message();
    // Never a wrong token: what arrived before the failure is the engine's.
    EXPECT_TRUE(testing::IsPrefix(r.ids, testing::Ids(want[i]))) << "request " << i << " got a wrong token";
    EXPECT_LT(r.ids.size(), want[i].tokens.size()) << "request " << i << " finished before the kill";
    slowest = std::max(slowest, r.end - killed);
  }
  std::cout << "[kill] slowest stream ended " << slowest << " after the kill\n";
  EXPECT_LT(slowest, absl::Seconds(5));

  // The scheduler stays up, says not ready, refuses new work at once and
  // holds no blocks of the failed requests.
  EXPECT_TRUE(cluster->scheduler()->Running());
  EXPECT_TRUE(WaitNotServing(cluster->address(), absl::Seconds(5)));
  v1::GenerateRequest small = testing::ToWire(requests[0], "while-down");
  const testing::StreamRecord refused = testing::Stream(stub.get(), small, absl::Seconds(10));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_LT(refused.end - refused.start, absl::Seconds(1));
  EXPECT_LT(testing::TimeUntilIdle(stub.get(), absl::Seconds(1)), absl::Seconds(1));

  // The stage returns on its address: re-handshake, caches treated as lost,
  // every request exactly right again.
  ASSERT_TRUE(cluster->RestartWorker(1));
  ASSERT_TRUE(WaitForServing(cluster->address(), "", testing::Scaled(absl::Seconds(30))).ok());
  ExpectExact(stub.get(), requests, want, "after-");
  EXPECT_LT(testing::TimeUntilIdle(stub.get(), testing::Scaled(absl::Seconds(5))), testing::Scaled(absl::Seconds(5)));
}

TEST(FaultTest, FrozenStageFailsThePipelineWhileDeadlinesStillFire) {
  const auto requests = LongRequests(4);
  const auto want = testing::EngineReference(ReliabilityModel(), requests);
  auto cluster = testing::TestCluster::Start(
      {.model = ReliabilityModel(), .stages = 3, .num_blocks = 64, .delay_per_layer_ms = 15}, "fault_stop");
  ASSERT_NE(cluster, nullptr);
  auto stub = v1::Generation::NewStub(CreatePublicChannel(cluster->address()));

  // Two streams without a deadline of their own, two with 1.5 s.
  Fleet open, timed;
  const std::vector<GenerationRequest> a(requests.begin(), requests.begin() + 2);
  const std::vector<GenerationRequest> b(requests.begin() + 2, requests.end());
  StartStreams(stub.get(), a, &open, testing::Scaled(absl::Seconds(60)), "open-");
  // Not scaled: the deadline must fire before the monitor notices the
  // frozen stage (~3 s after the SIGSTOP), under sanitizers too.
  const absl::Duration timed_deadline = absl::Milliseconds(1500);
  const absl::Time timed_start = absl::Now();
  StartStreams(stub.get(), b, &timed, timed_deadline, "timed-");
  // SIGSTOP: the process is alive and its sockets accept, but nothing
  // answers: the stall a hung GPU or a paused container looks like.
  cluster->worker(1)->Signal(SIGSTOP);
  const absl::Time stopped = absl::Now();
  Join(&timed);
  // The scheduler expired them itself (its blocks are free) while the two
  // open streams still wait on the frozen stage: the deadline did not need
  // the pipeline failure to fire.
  const absl::Time until = absl::Now() + absl::Milliseconds(500);
  v1::GetLoadResponse load;
  do {
    load = testing::Load(stub.get());
  } while (load.num_running_requests() + load.num_waiting_requests() != 2 && absl::Now() < until);
  EXPECT_EQ(load.num_running_requests() + load.num_waiting_requests(), 2);
  for (size_t i = 0; i < b.size(); ++i) {
    const auto& r = timed.records[i];
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << r.status.error_message();
    EXPECT_LT(r.end - timed_start, timed_deadline + absl::Milliseconds(700)) << "deadline fired late";
    EXPECT_TRUE(testing::IsPrefix(r.ids, testing::Ids(want[2 + i])));
  }
  Join(&open);
  for (size_t i = 0; i < a.size(); ++i) {
    const auto& r = open.records[i];
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE) << r.status.error_message();
    EXPECT_TRUE(testing::IsPrefix(r.ids, testing::Ids(want[i])));
    EXPECT_LT(r.end - stopped, absl::Seconds(6)) << "the frozen stage was noticed late";
  }
  std::cout << "[stop] unanswered stage noticed after " << open.records[0].end - stopped << "\n";
  EXPECT_TRUE(cluster->scheduler()->Running());
  EXPECT_TRUE(WaitNotServing(cluster->address(), absl::Seconds(5)));
  EXPECT_LT(testing::TimeUntilIdle(stub.get(), absl::Seconds(1)), absl::Seconds(1));

  cluster->worker(1)->Signal(SIGCONT);
  ASSERT_TRUE(WaitForServing(cluster->address(), "", testing::Scaled(absl::Seconds(30))).ok());
  ExpectExact(stub.get(), requests, want, "thawed-");
}

TEST(FaultTest, StageSlowerThanTheStepTimeoutFailsPromptlyAndTheSchedulerReconnects) {
  // Every stage sleeps 1.5 s per layer: a micro-batch needs > 4 s, the step
  // timeout is 1 s. The stages still answer their monitor probes (gRPC
  // threads are not the compute thread), so only the step timeout notices.
  auto cluster = testing::TestCluster::Start({.model = ReliabilityModel(),
                                              .stages = 3,
                                              .num_blocks = 64,
                                              .delay_per_layer_ms = 1500,
                                              .scheduler_flags = {"--step-timeout-s", "1"}},
                                             "fault_slow");
  ASSERT_NE(cluster, nullptr);
  auto stub = v1::Generation::NewStub(CreatePublicChannel(cluster->address()));
  v1::GenerateRequest req = testing::ToWire(LongRequests(1)[0], "slow");
  const testing::StreamRecord r = testing::Stream(stub.get(), req, testing::Scaled(absl::Seconds(30)));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE) << r.status.error_message();
  EXPECT_NE(r.status.error_message().find("did not come back"), std::string::npos) << r.status.error_message();
  EXPECT_LT(r.end - r.start, absl::Seconds(3));
  EXPECT_TRUE(cluster->scheduler()->Running());
  // It reconnects (the stages are slow, not gone).
  EXPECT_TRUE(WaitForServing(cluster->address(), "", testing::Scaled(absl::Seconds(30))).ok());
  EXPECT_LT(testing::TimeUntilIdle(stub.get(), absl::Seconds(1)), absl::Seconds(1));
}

TEST(FaultTest, ClientsDisconnectingMidStreamFreeTheirBlocksAtOnce) {
  const auto requests = LongRequests(16);
  auto cluster = testing::TestCluster::Start(
      {.model = ReliabilityModel(), .stages = 3, .num_blocks = 64, .delay_per_layer_ms = 15}, "fault_cancel");
  ASSERT_NE(cluster, nullptr);
  auto stub = v1::Generation::NewStub(CreatePublicChannel(cluster->address()));
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>>> readers;
  for (size_t i = 0; i < requests.size(); ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    readers.push_back(stub->Generate(contexts.back().get(), testing::ToWire(requests[i], absl::StrCat("gone-", i))));
  }
  v1::GenerateResponse resp;
  for (auto& reader : readers) {  // every one is streaming
    ASSERT_TRUE(reader->Read(&resp)) << reader->Finish().error_message();
  }
  const auto busy = testing::Load(stub.get());
  EXPECT_GT(busy.used_kv_blocks(), 0);
  EXPECT_EQ(busy.num_running_requests() + busy.num_waiting_requests(), 16);
  EXPECT_GT(SchedulerMetric(cluster.get(), "vllm:kv_cache_usage_perc"), 0);
  // Every client goes away at once (a load balancer dropping connections).
  const absl::Time cancelled = absl::Now();
  for (auto& ctx : contexts) ctx->TryCancel();
  const absl::Duration freed = testing::TimeUntilIdle(stub.get(), absl::Seconds(5));
  std::cout << "[cancel] 16 cancelled streams: blocks free after " << freed << "\n";
  EXPECT_LT(freed, absl::Milliseconds(500));
  // What monitoring sees (issue 10's /metrics) agrees.
  EXPECT_EQ(SchedulerMetric(cluster.get(), "vllm:kv_cache_usage_perc"), 0);
  EXPECT_EQ(SchedulerMetric(cluster.get(), "vllm:num_requests_running"), 0);
  for (auto& reader : readers) {
    while (reader->Read(&resp)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  (void)cancelled;
  // Serving as before.
  const auto few = LongRequests(2);
  ExpectExact(stub.get(), few, testing::EngineReference(ReliabilityModel(), few), "next-");
}

TEST(FaultTest, RestartedSchedulerIsAcceptedByTheRunningWorkers) {
  const auto requests = LongRequests(4);
  const auto want = testing::EngineReference(ReliabilityModel(), requests);
  auto cluster = testing::TestCluster::Start(
      {.model = ReliabilityModel(), .stages = 3, .num_blocks = 64, .delay_per_layer_ms = 15}, "fault_sched");
  ASSERT_NE(cluster, nullptr);
  {
    auto stub = v1::Generation::NewStub(CreatePublicChannel(cluster->address()));
    Fleet fleet;
    StartStreams(stub.get(), requests, &fleet, testing::Scaled(absl::Seconds(60)), "before-");
    cluster->KillScheduler();  // SIGKILL with streams in flight through the stages
    const absl::Time killed = absl::Now();
    Join(&fleet);
    for (size_t i = 0; i < requests.size(); ++i) {
      EXPECT_EQ(fleet.records[i].status.error_code(), grpc::StatusCode::UNAVAILABLE);
      EXPECT_TRUE(testing::IsPrefix(fleet.records[i].ids, testing::Ids(want[i])));
      EXPECT_LT(fleet.records[i].end - killed, absl::Seconds(5));
    }
  }
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(cluster->worker(i)->Running()) << "worker " << i;
  // A new scheduler (new port, new epoch) takes over the same workers; the
  // old epoch's per-sequence state is dropped by the workers.
  ASSERT_TRUE(cluster->StartScheduler({}));
  auto stub = v1::Generation::NewStub(CreatePublicChannel(cluster->address()));
  ExpectExact(stub.get(), requests, want, "after-");
  EXPECT_LT(testing::TimeUntilIdle(stub.get(), testing::Scaled(absl::Seconds(5))), testing::Scaled(absl::Seconds(5)));
}

}  // namespace
}  // namespace spar
