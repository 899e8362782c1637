// Multi-process: a scheduler and 3 stage workers (separate processes on
// 127.0.0.1, cpu backend, make-tiny GLM-5) serve 32 concurrent streamed
// requests of mixed lengths; every output equals the single-process
// Engine's for the same request and seed. Plus the public API's behaviour
// over the wire: health, model info, validation, abort, client
// cancellation and deadlines freeing KV blocks.
#include <grpcpp/client_context.h>

#include <atomic>
#include <map>
#include <fstream>
#include <sstream>
#include <thread>

#include "engine/make_tiny.h"
#include "gtest/gtest.h"
#include "services/common/daemon.h"
#include "services/common/health_client.h"
#include "spar/v1/generation.grpc.pb.h"
#include "spar/v1/worker.grpc.pb.h"
#include "tests/reliability/grpc_client_util.h"
#include "tests/services/mixed_requests.h"
#include "tests/services/test_cluster.h"

namespace spar {
namespace {

// make-tiny's GLM-5, seed 11: the reliability tests' checkpoint.
const std::string& TinyModel() { return testing::ReliabilityModel(); }

// As the reliability tests send it, plus every token's log-probability.
v1::GenerateRequest ToProto(const GenerationRequest& r, const std::string& id) {
  v1::GenerateRequest p = testing::ToWire(r, id);
  p.mutable_response()->set_output_logprobs(true);
  p.mutable_response()->set_top_logprobs(r.top_logprobs);
  return p;
}

struct Streamed {
  grpc::Status status;
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  std::vector<std::vector<std::pair<int32_t, float>>> top;
  v1::FinishInfo finish;
  int messages = 0;
  bool usage = false;
  absl::Duration first_message = absl::InfiniteDuration();
};

Streamed Stream(v1::Generation::Stub* stub, const v1::GenerateRequest& req, absl::Duration deadline) {
  Streamed out;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  const absl::Time start = absl::Now();
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse resp;
  while (reader->Read(&resp)) {
    if (out.messages++ == 0) out.first_message = absl::Now() - start;
    const auto& o = resp.output();
    out.ids.insert(out.ids.end(), o.token_ids().begin(), o.token_ids().end());
    out.logprobs.insert(out.logprobs.end(), o.logprobs().begin(), o.logprobs().end());
    for (const auto& t : o.top_logprobs()) {
      std::vector<std::pair<int32_t, float>> row;
      for (int k = 0; k < t.token_ids_size(); ++k) row.emplace_back(t.token_ids(k), t.logprobs(k));
      out.top.push_back(row);
    }
    if (o.has_finish()) out.finish = o.finish();
    out.usage = out.usage || resp.has_usage();
  }
  out.status = reader->Finish();
  return out;
}

// Every request streamed at once, one client thread each.
std::vector<Streamed> StreamAll(v1::Generation::Stub* stub, const std::vector<GenerationRequest>& requests,
                                const std::string& id_prefix) {
  std::vector<Streamed> got(requests.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < requests.size(); ++i) {
    clients.emplace_back([&, i] {
      got[i] = Stream(stub, ToProto(requests[i], absl::StrCat(id_prefix, i)), absl::Seconds(120));
    });
  }
  for (auto& t : clients) t.join();
  return got;
}

v1::GetLoadResponse Load(v1::Generation::Stub* stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  v1::GetLoadResponse r;
  EXPECT_TRUE(stub->GetLoad(&ctx, v1::GetLoadRequest(), &r).ok());
  return r;
}

// Waits until the scheduler holds no KV blocks and runs nothing.
bool WaitIdle(v1::Generation::Stub* stub, absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time until = absl::Now() + timeout;
  while (absl::Now() < until) {
    auto l = Load(stub);
    if (l.used_kv_blocks() == 0 && l.num_running_requests() == 0 && l.num_waiting_requests() == 0) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

TEST(ClusterTest, ThirtyTwoConcurrentStreamsEqualTheSingleProcessEngine) {
  const auto requests = testing::MixedRequests(32, 7);
  const auto want = testing::EngineReference(TinyModel(), requests);
  const absl::Time start = absl::Now();
  ASSERT_EQ(want.size(), requests.size());
  // 16 blocks for 32 sequences of up to 2 blocks: preemption by recompute
  // happens; 48-token micro-batches: long prompts are prefilled in chunks.
  auto cluster = testing::TestCluster::Start(
      {.model = TinyModel(), .stages = 3, .num_blocks = 16, .scheduler_flags = {"--max-batch-tokens", "48"}},
      "cluster32");
  ASSERT_NE(cluster, nullptr);
  auto stub = v1::Generation::NewStub(CreatePublicChannel(cluster->address()));
  const std::vector<Streamed> got = StreamAll(stub.get(), requests, "r");
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(got[i].status.ok()) << "request " << i << ": " << got[i].status.error_message();
    std::vector<int32_t> ids;
    std::vector<float> lps;
    for (const auto& t : want[i].tokens) {
      ids.push_back(t.id);
      lps.push_back(t.logprob);
    }
    EXPECT_EQ(got[i].ids, ids) << "request " << i;
    EXPECT_EQ(got[i].logprobs, lps) << "request " << i;  // bit-identical fp32
    if (requests[i].top_logprobs > 0) {
      ASSERT_EQ(got[i].top.size(), want[i].tokens.size()) << "request " << i;
      for (size_t k = 0; k < got[i].top.size(); ++k) EXPECT_EQ(got[i].top[k], want[i].tokens[k].top) << i;
    }
    if (want[i].finish == FinishReason::kStop) {
      EXPECT_EQ(got[i].finish.reason(), v1::FINISH_REASON_STOP) << "request " << i;
      const int32_t stop = got[i].finish.has_eos_token_id() ? got[i].finish.eos_token_id() : got[i].finish.stop_token_id();
      EXPECT_EQ(stop, *want[i].stop_token) << "request " << i;
    } else {
      EXPECT_EQ(got[i].finish.reason(), v1::FINISH_REASON_LENGTH) << "request " << i;
    }
    EXPECT_TRUE(got[i].usage) << "request " << i;
  }
  EXPECT_TRUE(WaitIdle(stub.get()));
  const auto load = Load(stub.get());
  EXPECT_EQ(load.used_kv_blocks(), 0);
  EXPECT_EQ(load.total_kv_blocks(), 16);
  std::cout << "[cluster] 32 streams in " << absl::Now() - start << ": " << load.num_micro_batches()
            << " micro-batches, " << load.num_preemptions() << " preemptions\n";
}

// MTP speculative decoding across 3 worker processes (the MTP layer on the
// last stage): with --num-speculative-tokens 1..4, bf16 and FP8, every
// stream equals the single-process engine without speculation, under
// preemption and chunked prefill, and no KV block stays held.
TEST(ClusterTest, SpeculativeDecodingEqualsTheEngineWithoutIt) {
  for (auto [fp8, k] : {std::pair{false, 1}, std::pair{false, 2}, std::pair{false, 3}, std::pair{false, 4},
                        std::pair{true, 3}}) {
    static std::map<bool, std::string> models;
    if (!models.count(fp8)) {
      MakeTinyOptions m;
      m.seed = 11;
      m.fp8 = fp8;
      m.mtp = true;
      m.predictable = true;
      m.out_dir = testing::TempDir(fp8 ? "cluster_mtp_fp8" : "cluster_mtp_bf16");
      ASSERT_TRUE(MakeTinyModel(m).ok());
      models[fp8] = m.out_dir;
    }
    const std::string& model = models[fp8];
    const auto requests = testing::MixedRequests(10, 20 + k);
    const auto want = testing::EngineReference(model, requests);
    ASSERT_EQ(want.size(), requests.size());
    const std::vector<std::string> speculate = {"--num-speculative-tokens", absl::StrCat(k)};
    std::vector<std::string> scheduler_flags = {"--max-batch-tokens", "48"};
    scheduler_flags.insert(scheduler_flags.end(), speculate.begin(), speculate.end());
    auto cluster = testing::TestCluster::Start({.model = model,
                                                .stages = 3,
                                                .num_blocks = 8,
                                                .scheduler_flags = scheduler_flags,
                                                .worker_flags = speculate},
                                               absl::StrCat("cluster_spec", k, fp8 ? "_fp8" : ""));
    ASSERT_NE(cluster, nullptr);
    auto stub = v1::Generation::NewStub(CreatePublicChannel(cluster->address()));
    const std::vector<Streamed> got = StreamAll(stub.get(), requests, "spec");
    const std::string what = absl::StrCat(fp8 ? "fp8" : "bf16", " k=", k);
    for (size_t i = 0; i < requests.size(); ++i) {
      ASSERT_TRUE(got[i].status.ok()) << what << " request " << i << ": " << got[i].status.error_message();
      std::vector<int32_t> ids;
      std::vector<float> lps;
      for (const auto& t : want[i].tokens) {
        ids.push_back(t.id);
        lps.push_back(t.logprob);
      }
      EXPECT_EQ(got[i].ids, ids) << what << " request " << i;
      EXPECT_EQ(got[i].logprobs, lps) << what << " request " << i;
    }
    EXPECT_TRUE(WaitIdle(stub.get())) << what;
    EXPECT_EQ(Load(stub.get()).used_kv_blocks(), 0) << what;
  }
}

// The same through 3 worker processes on the trained tiny model's own MTP
// layer (models/tiny-glm5-chat, PROVENANCE.md), bf16 and FP8: speculation
// changes no stream and leaves no block held.
TEST(ClusterTest, TrainedModelSpeculatesThroughThreeStages) {
  for (auto [variant, k] : {std::pair{"bf16", 2}, std::pair{"fp8", 3}}) {
    const std::string model = testing::SourcePath(absl::StrCat("models/tiny-glm5-chat/", variant));
    const auto requests = testing::MixedRequests(8, 40 + k);
    const auto want = testing::EngineReference(model, requests);
    ASSERT_EQ(want.size(), requests.size());
    const std::vector<std::string> speculate = {"--num-speculative-tokens", absl::StrCat(k)};
    std::vector<std::string> scheduler_flags = {"--max-batch-tokens", "48"};
    scheduler_flags.insert(scheduler_flags.end(), speculate.begin(), speculate.end());
    auto cluster = testing::TestCluster::Start(
        {.model = model, .stages = 3, .scheduler_flags = scheduler_flags, .worker_flags = speculate},
        absl::StrCat("cluster_trained_spec_", variant));
    ASSERT_NE(cluster, nullptr);
    auto stub = v1::Generation::NewStub(CreatePublicChannel(cluster->address()));
    const std::vector<Streamed> got = StreamAll(stub.get(), requests, "trained");
    for (size_t i = 0; i < requests.size(); ++i) {
      ASSERT_TRUE(got[i].status.ok()) << variant << " request " << i << ": " << got[i].status.error_message();
      std::vector<int32_t> ids;
      for (const auto& t : want[i].tokens) ids.push_back(t.id);
      EXPECT_EQ(got[i].ids, ids) << variant << " k=" << k << " request " << i;
    }
    EXPECT_TRUE(WaitIdle(stub.get())) << variant;
    EXPECT_EQ(Load(stub.get()).used_kv_blocks(), 0) << variant;
  }
}

// `spar plan`'s suggested split reaches both daemons through the same flag
// (SPAR_STAGE_LAYERS in Kubernetes): the workers preload exactly those layers,
// and the pipeline still equals the single-process engine.
TEST(ClusterTest, ExplicitStageLayersReachSchedulerAndWorkers) {
  const auto requests = testing::MixedRequests(6, 3);
  const auto want = testing::EngineReference(TinyModel(), requests);
  const std::vector<std::string> split = {"--stage-layers", "0:2,2:3"};  // the even split is 0:1,1:3
  auto cluster = testing::TestCluster::Start(
      {.model = TinyModel(), .stages = 2, .scheduler_flags = split, .worker_flags = split}, "cluster_split");
  ASSERT_NE(cluster, nullptr);
  auto stub = v1::Generation::NewStub(CreatePublicChannel(cluster->address()));
  for (size_t i = 0; i < requests.size(); ++i) {
    const Streamed got = Stream(stub.get(), ToProto(requests[i], absl::StrCat("s", i)), absl::Seconds(60));
    ASSERT_TRUE(got.status.ok()) << "request " << i << ": " << got.status.error_message();
    std::vector<int32_t> ids;
    for (const auto& t : want[i].tokens) ids.push_back(t.id);
    EXPECT_EQ(got.ids, ids) << "request " << i;
  }
  auto log_of = [&](const std::string& name) {
    std::ifstream in(cluster->log_path(name));
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  EXPECT_NE(log_of("worker0").find("loading layers [0, 2)"), std::string::npos) << log_of("worker0");
  EXPECT_NE(log_of("worker1").find("loading layers [2, 3)"), std::string::npos) << log_of("worker1");
  EXPECT_EQ(log_of("worker0").find("loading layers [0, 1)"), std::string::npos);
}

TEST(ClusterTest, PublicApiBehaviour) {
  auto cluster = testing::TestCluster::Start({.model = TinyModel(), .stages = 2, .num_blocks = 64, .scheduler_flags = {}}, "cluster_api");
  ASSERT_NE(cluster, nullptr);
  EXPECT_TRUE(CheckHealth(cluster->address(), "spar.v1.Generation").ok());
  for (const auto& w : cluster->worker_addresses()) EXPECT_TRUE(CheckHealth(w, "spar.v1.Worker").ok()) << w;
  auto stub = v1::Generation::NewStub(CreatePublicChannel(cluster->address()));
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    v1::GetModelInfoResponse info;
    ASSERT_TRUE(stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).ok());
    EXPECT_EQ(info.vocab_size(), 320);
    EXPECT_EQ(info.pipeline_stages(), 2);
    EXPECT_EQ(info.kv_block_size(), 64);
    EXPECT_EQ(info.total_kv_blocks(), 64);
    EXPECT_EQ(info.model_type(), "glm_moe_dsa");
    EXPECT_TRUE(info.supports_text_input());
    EXPECT_EQ(info.eos_token_ids_size(), 3);
  }
  // Validation names the field; the server is unaffected.
  v1::GenerateRequest bad;
  bad.set_text("hi");
  bad.mutable_sampling()->set_top_p(2);
  Streamed b = Stream(stub.get(), bad, absl::Seconds(10));
  EXPECT_EQ(b.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(b.status.error_message().find("sampling.top_p"), std::string::npos) << b.status.error_message();
  // Text in, text and usage out.
  v1::GenerateRequest text;
  text.set_text("The capital of France is");
  text.mutable_sampling()->set_temperature(0);
  text.mutable_stopping()->set_max_tokens(5);
  text.mutable_stopping()->set_ignore_eos(true);
  Streamed t = Stream(stub.get(), text, absl::Seconds(30));
  ASSERT_TRUE(t.status.ok()) << t.status.error_message();
  EXPECT_EQ(t.ids.size(), 5u);
  EXPECT_TRUE(t.usage);
  EXPECT_EQ(t.finish.reason(), v1::FINISH_REASON_LENGTH);

  // A long request, aborted by id mid-stream: CANCELLED, blocks freed.
  v1::GenerateRequest longreq;
  longreq.set_request_id("long-1");
  for (int i = 0; i < 100; ++i) longreq.mutable_token_ids()->add_ids(7);
  longreq.mutable_stopping()->set_max_tokens(3000);
  longreq.mutable_stopping()->set_ignore_eos(true);
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    auto reader = stub->Generate(&ctx, longreq);
    v1::GenerateResponse resp;
    ASSERT_TRUE(reader->Read(&resp));
    EXPECT_EQ(resp.request_id(), "long-1");
    grpc::ClientContext actx;
    actx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    v1::AbortRequest areq;
    areq.add_request_ids("long-1");
    v1::AbortResponse aresp;
    ASSERT_TRUE(stub->Abort(&actx, areq, &aresp).ok());
    ASSERT_EQ(aresp.aborted_request_ids_size(), 1);
    while (reader->Read(&resp)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
    EXPECT_TRUE(WaitIdle(stub.get(), absl::Seconds(5)));
  }
  // The client goes away mid-stream: the request is cancelled, blocks freed.
  {
    grpc::ClientContext ctx;
    longreq.set_request_id("long-2");
    auto reader = stub->Generate(&ctx, longreq);
    v1::GenerateResponse resp;
    ASSERT_TRUE(reader->Read(&resp));
    ctx.TryCancel();
    while (reader->Read(&resp)) {
    }
    reader->Finish();
    EXPECT_TRUE(WaitIdle(stub.get(), absl::Seconds(5)));
  }
  // The call's deadline ends the request (3000 tokens take ~10 s here):
  // DEADLINE_EXCEEDED, blocks freed.
  longreq.set_request_id("long-3");
  Streamed d = Stream(stub.get(), longreq, absl::Milliseconds(1500));
  EXPECT_EQ(d.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  std::cout << "[deadline] first message after " << d.first_message << ", " << d.ids.size() << " tokens\n";
  EXPECT_TRUE(WaitIdle(stub.get(), absl::Seconds(5)));
  // Still serving.
  Streamed again = Stream(stub.get(), text, absl::Seconds(30));
  EXPECT_TRUE(again.status.ok());
  EXPECT_EQ(again.ids, t.ids);
}

// A stage worker dies mid-stream: the stream ends promptly with UNAVAILABLE
// (never hangs), the scheduler reports not ready, and it reconnects (new
// epoch, caches treated as lost) once the worker is back on its address.
TEST(ClusterTest, WorkerLossFailsStreamsPromptlyAndRecovers) {
  auto cluster = testing::TestCluster::Start({.model = TinyModel(), .stages = 3, .num_blocks = 64, .scheduler_flags = {}},
                                             "cluster_fault");
  ASSERT_NE(cluster, nullptr);
  auto stub = v1::Generation::NewStub(CreatePublicChannel(cluster->address()));
  v1::GenerateRequest longreq;
  longreq.mutable_token_ids()->add_ids(5);
  longreq.mutable_stopping()->set_max_tokens(3000);
  longreq.mutable_stopping()->set_ignore_eos(true);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  auto reader = stub->Generate(&ctx, longreq);
  v1::GenerateResponse resp;
  ASSERT_TRUE(reader->Read(&resp));
  cluster->KillWorker(1);
  const absl::Time killed = absl::Now();
  while (reader->Read(&resp)) {
  }
  grpc::Status s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_LT(absl::Now() - killed, absl::Seconds(10));
  // Not ready while the stage is gone; new requests are refused, not queued.
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (CheckHealth(cluster->address(), "").ok() && absl::Now() < until) absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(CheckHealth(cluster->address(), "").ok());
  v1::GenerateRequest small;
  small.mutable_token_ids()->add_ids(5);
  small.mutable_stopping()->set_max_tokens(4);
  small.mutable_sampling()->set_temperature(0);
  EXPECT_EQ(Stream(stub.get(), small, absl::Seconds(10)).status.error_code(), grpc::StatusCode::UNAVAILABLE);
  // Back on its address: the scheduler re-handshakes and serves again.
  ASSERT_TRUE(cluster->RestartWorker(1));
  EXPECT_TRUE(WaitForServing(cluster->address(), "", absl::Seconds(30)).ok());
  Streamed ok = Stream(stub.get(), small, absl::Seconds(30));
  EXPECT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_EQ(ok.ids.size(), 4u);
  EXPECT_TRUE(WaitIdle(stub.get()));
}

}  // namespace
}  // namespace spar
