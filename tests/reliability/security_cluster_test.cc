// Security of a real cluster (scheduler + 2 workers on 127.0.0.1):
//   * API keys on the public gRPC API (UNAUTHENTICATED without one; health
//     stays open for probes); keys and request bodies never reach a log;
//   * TLS on the public API with client certificates, and mutual TLS on the
//     worker plane: strangers cannot even reach a worker;
//   * a shared worker-plane token: calls without it are refused before a
//     micro-batch is read.
// Certificates are made by the test with the openssl tool.
#include <httplib.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <csignal>
#include <fstream>

#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "services/common/daemon.h"
#include "services/common/health_client.h"
#include "spar/v1/worker.grpc.pb.h"
#include "tests/reliability/grpc_client_util.h"
#include "tests/reliability/test_certs.h"
#include "tests/services/test_cluster.h"

namespace spar {
namespace {

using testing::ReliabilityModel;

std::shared_ptr<grpc::Channel> TlsChannel(const std::string& address, const std::string& ca,
                                          const testing::CertFiles* client = nullptr,
                                          const std::string& server_name = "") {
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = testing::ReadText(ca);
  if (client != nullptr) {
    o.pem_cert_chain = testing::ReadText(client->cert);
    o.pem_private_key = testing::ReadText(client->key);
  }
  grpc::ChannelArguments args;
  if (!server_name.empty()) args.SetSslTargetNameOverride(server_name);
  return grpc::CreateCustomChannel(address, grpc::SslCredentials(o), args);
}

grpc::Status Health(const std::shared_ptr<grpc::Channel>& channel) {
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status s = stub->Check(&ctx, req, &resp);
  if (s.ok() && resp.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "not serving");
  }
  return s;
}

bool WaitServing(const std::shared_ptr<grpc::Channel>& channel, absl::Duration timeout) {
  const absl::Time until = absl::Now() + timeout;
  while (absl::Now() < until) {
    if (Health(channel).ok()) return true;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return false;
}

grpc::Status WorkerGetInfo(const std::shared_ptr<grpc::Channel>& channel,
                           const std::vector<std::pair<std::string, std::string>>& metadata = {}) {
  auto stub = v1::Worker::NewStub(channel);
  grpc::ClientContext ctx;
  for (const auto& [k, v] : metadata) ctx.AddMetadata(k, v);
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(3)));
  v1::WorkerInfo info;
  return stub->GetInfo(&ctx, v1::GetInfoRequest(), &info);
}

v1::GenerateRequest Greedy(const std::string& text) {
  v1::GenerateRequest r;
  r.set_text(text);
  r.mutable_sampling()->set_temperature(0);
  r.mutable_stopping()->set_max_tokens(6);
  r.mutable_stopping()->set_ignore_eos(true);
  return r;
}

bool LogsContain(testing::TestCluster* cluster, const std::string& needle) {
  for (const char* log : {"scheduler1", "worker0", "worker1"}) {
    if (testing::ReadText(cluster->log_path(log)).find(needle) != std::string::npos) return true;
  }
  return false;
}

TEST(SecurityClusterTest, ApiKeysGuardEveryPublicRpcAndNoSecretOrBodyIsLogged) {
  const std::string dir = testing::TempDir("security_keys_files");
  const std::string key = "sk-spar-9f8e7d6c5b4a";
  std::ofstream(dir + "/keys") << "# operator keys\n" << key << "\nsk-second-key-0123\n";
  auto cluster = testing::TestCluster::Start(
      {.model = ReliabilityModel(), .stages = 2, .num_blocks = 32, .scheduler_flags = {"--api-key-file", dir + "/keys"}},
      "security_keys");
  ASSERT_NE(cluster, nullptr);  // health answered without a key: probes need none
  auto stub = v1::Generation::NewStub(CreatePublicChannel(cluster->address()));
  const std::string prompt = "zebra-confidential-prompt-4711";
  const std::vector<std::pair<std::string, std::string>> right = {{"authorization", "Bearer " + key}};

  for (const auto& md : std::vector<std::vector<std::pair<std::string, std::string>>>{
           {}, {{"authorization", "Bearer sk-spar-9f8e7d6c5b4b"}}, {{"authorization", key}},
           {{"authorization", "Basic " + key}}, {{"x-api-key", key}}}) {
    const testing::StreamRecord r = testing::Stream(stub.get(), Greedy(prompt), absl::Seconds(10), md);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << r.status.error_message();
    EXPECT_EQ(r.status.error_message().find("sk-"), std::string::npos) << "the error repeats a key";
    EXPECT_EQ(r.messages, 0);
  }
  {
    grpc::ClientContext ctx;
    v1::GetLoadResponse load;
    EXPECT_EQ(stub->GetLoad(&ctx, v1::GetLoadRequest(), &load).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext ctx;
    v1::GetModelInfoResponse info;
    EXPECT_EQ(stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext ctx;
    v1::AbortRequest req;
    req.add_request_ids("x");
    v1::AbortResponse resp;
    EXPECT_EQ(stub->Abort(&ctx, req, &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  const testing::StreamRecord ok = testing::Stream(stub.get(), Greedy(prompt), absl::Seconds(30), right);
  ASSERT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_EQ(ok.ids.size(), 6u);
  const testing::StreamRecord second =
      testing::Stream(stub.get(), Greedy(prompt), absl::Seconds(30), {{"authorization", "bearer sk-second-key-0123"}});
  EXPECT_TRUE(second.status.ok()) << second.status.error_message();
  EXPECT_EQ(second.ids, ok.ids);
  EXPECT_TRUE(CheckHealth(cluster->address(), "spar.v1.Generation").ok());

  // The same keys guard the OpenAI HTTP API: 401 without, 200 with; the
  // probes stay open.
  const std::string& http = cluster->http_address();
  httplib::Client web(http.substr(0, http.rfind(':')), std::stoi(http.substr(http.rfind(':') + 1)));
  web.set_read_timeout(30, 0);
  const std::string body = R"({"prompt": ")" + prompt + R"(", "max_tokens": 3, "temperature": 0})";
  for (const httplib::Headers& headers : std::vector<httplib::Headers>{
           {}, {{"Authorization", "Bearer sk-wrong"}}, {{"Authorization", key}}, {{"X-Api-Key", key}}}) {
    auto r = web.Post("/v1/completions", headers, body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << r->body;
    EXPECT_EQ(r->body.find("sk-"), std::string::npos) << "the error repeats a key: " << r->body;
  }
  auto models = web.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 401);
  auto good = web.Post("/v1/completions", {{"Authorization", "Bearer " + key}}, body, "application/json");
  ASSERT_TRUE(good);
  EXPECT_EQ(good->status, 200) << good->body;
  auto health = web.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);

  // Stop the daemons so their logs are complete, then read them.
  cluster->KillScheduler();
  EXPECT_FALSE(LogsContain(cluster.get(), key)) << "an API key reached a log";
  EXPECT_FALSE(LogsContain(cluster.get(), "sk-second-key")) << "an API key reached a log";
  EXPECT_FALSE(LogsContain(cluster.get(), prompt)) << "a request body reached a log";
  EXPECT_TRUE(LogsContain(cluster.get(), "1 API key") || LogsContain(cluster.get(), "2 API key"))
      << "the scheduler does not say that keys are on";
}

class TlsClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir("security_tls_files");
    public_ca_ = testing::MakeCa(dir_, "public-ca");
    server_ = testing::MakeLeaf(dir_, "scheduler-public", public_ca_, "DNS:localhost,IP:127.0.0.1");
    client_ca_ = testing::MakeCa(dir_, "client-ca");
    client_ = testing::MakeLeaf(dir_, "client", client_ca_, "DNS:client");
    plane_ca_ = testing::MakeCa(dir_, "plane-ca");
    worker_ = testing::MakeLeaf(dir_, "worker", plane_ca_, "DNS:spar-worker");
    plane_scheduler_ = testing::MakeLeaf(dir_, "scheduler-plane", plane_ca_, "DNS:spar-scheduler");
    stranger_ca_ = testing::MakeCa(dir_, "stranger-ca");
    stranger_ = testing::MakeLeaf(dir_, "stranger", stranger_ca_, "DNS:spar-worker");
  }
  std::string dir_;
  testing::CertFiles public_ca_, server_, client_ca_, client_, plane_ca_, worker_, plane_scheduler_, stranger_ca_,
      stranger_;
};

TEST_F(TlsClusterTest, PublicTlsWithClientCertificatesAndMutualTlsWorkerPlane) {
  const std::string key = "sk-tls-test-key";
  auto cluster = testing::TestCluster::Start(
      {.model = ReliabilityModel(),
       .stages = 2,
       .num_blocks = 32,
       .scheduler_flags = {"--tls-cert", server_.cert, "--tls-key", server_.key, "--tls-ca", client_ca_.cert,
                           "--api-key", key, "--worker-tls-cert", plane_scheduler_.cert, "--worker-tls-key",
                           plane_scheduler_.key, "--worker-tls-ca", plane_ca_.cert, "--worker-tls-server-name",
                           "spar-worker"},
       .worker_flags = {"--worker-tls-cert", worker_.cert, "--worker-tls-key", worker_.key, "--worker-tls-ca",
                        plane_ca_.cert, "--worker-tls-server-name", "spar-worker"},
       .wait_for_serving = false,
       // Stage 0 is a TP group: its leader and peer reach each other
       // (JoinTpGroup, Configure, Pipeline) over the same mutual TLS.
       .tp_size = 2},
      "security_tls");
  ASSERT_NE(cluster, nullptr);
  auto good = TlsChannel(cluster->address(), public_ca_.cert, &client_);
  ASSERT_TRUE(WaitServing(good, absl::Seconds(60))) << "the TLS scheduler never became ready";
  auto stub = v1::Generation::NewStub(good);
  const testing::StreamRecord ok =
      testing::Stream(stub.get(), Greedy("hello over TLS"), absl::Seconds(30), {{"authorization", "Bearer " + key}});
  ASSERT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_EQ(ok.ids.size(), 6u);
  // TLS does not replace the key.
  EXPECT_EQ(testing::Stream(stub.get(), Greedy("no key"), absl::Seconds(10)).status.error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  // No client certificate, a plaintext client, a client trusting another CA:
  // no connection at all.
  EXPECT_FALSE(Health(TlsChannel(cluster->address(), public_ca_.cert)).ok());
  EXPECT_FALSE(Health(CreatePublicChannel(cluster->address())).ok());
  EXPECT_FALSE(Health(TlsChannel(cluster->address(), stranger_ca_.cert, &client_)).ok());

  // The worker plane: a stranger cannot reach a worker, with no certificate,
  // without TLS, or with a certificate of another CA; a plane certificate
  // can (what the scheduler and the previous stage hold).
  const std::string w = cluster->worker_addresses()[0];
  EXPECT_EQ(WorkerGetInfo(grpc::CreateChannel(w, grpc::InsecureChannelCredentials())).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(WorkerGetInfo(TlsChannel(w, plane_ca_.cert, nullptr, "spar-worker")).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(WorkerGetInfo(TlsChannel(w, plane_ca_.cert, &stranger_, "spar-worker")).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(WorkerGetInfo(TlsChannel(w, plane_ca_.cert, &plane_scheduler_, "spar-worker")).ok());
  // The OpenAI HTTP API is HTTPS with the same certificate, client
  // certificates and key. (A refused client may write to a socket the
  // server closed: SIGPIPE must not end the test.)
  ::signal(SIGPIPE, SIG_IGN);
  const std::string& http = cluster->http_address();
  const std::string host = http.substr(0, http.rfind(':'));
  const int port = std::stoi(http.substr(http.rfind(':') + 1));
  const std::string body = R"({"prompt": "hello over HTTPS", "max_tokens": 3, "temperature": 0})";
  const httplib::Headers auth = {{"Authorization", "Bearer " + key}};
  {
    httplib::SSLClient web(host, port, client_.cert, client_.key);
    web.set_ca_cert_path(public_ca_.cert.c_str());
    web.enable_server_certificate_verification(true);
    web.set_read_timeout(30, 0);
    auto r = web.Post("/v1/completions", auth, body, "application/json");
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 200) << r->body;
    auto no_key = web.Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(no_key);
    EXPECT_EQ(no_key->status, 401);
  }
  {
    httplib::SSLClient no_cert(host, port);
    no_cert.set_ca_cert_path(public_ca_.cert.c_str());
    no_cert.enable_server_certificate_verification(true);
    EXPECT_FALSE(no_cert.Post("/v1/completions", auth, body, "application/json")) << "served without a client cert";
    httplib::Client plain(host, port);
    auto r = plain.Post("/v1/completions", auth, body, "application/json");
    EXPECT_TRUE(!r || r->status != 200) << "served plaintext";
  }
  // Still serving after the strangers.
  EXPECT_TRUE(
      testing::Stream(stub.get(), Greedy("hello over TLS"), absl::Seconds(30), {{"authorization", "Bearer " + key}})
          .status.ok());
}

TEST(SecurityClusterTest, WorkerTokenRefusesCallsFromOutsideThePlane) {
  const std::string dir = testing::TempDir("security_token_files");
  const std::string token = "plane-token-5f4e3d2c1b";
  std::ofstream(dir + "/token") << token << "\n";
  auto cluster = testing::TestCluster::Start({.model = ReliabilityModel(),
                                              .stages = 2,
                                              .num_blocks = 32,
                                              .scheduler_flags = {"--worker-token-file", dir + "/token"},
                                              .worker_flags = {"--worker-token-file", dir + "/token"},
                                              .tp_size = 2},
                                             "security_token");
  // The scheduler reached both stages with the token, and each stage's TP
  // peer joined its leader with it (the leader configured it with it).
  ASSERT_NE(cluster, nullptr);
  auto stub = v1::Generation::NewStub(CreatePublicChannel(cluster->address()));
  const testing::StreamRecord ok = testing::Stream(stub.get(), Greedy("through the plane"), absl::Seconds(30));
  ASSERT_TRUE(ok.status.ok()) << ok.status.error_message();
  for (const std::string& w : cluster->worker_addresses()) {
    auto channel = grpc::CreateChannel(w, grpc::InsecureChannelCredentials());
    EXPECT_EQ(WorkerGetInfo(channel).error_code(), grpc::StatusCode::UNAUTHENTICATED) << w;
    EXPECT_EQ(WorkerGetInfo(channel, {{"authorization", "Bearer plane-token-wrong"}}).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_TRUE(WorkerGetInfo(channel, {{"authorization", "Bearer " + token}}).ok());
    // A forged micro-batch stream is refused before anything is read.
    auto wstub = v1::Worker::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    v1::PipelineSummary summary;
    auto writer = wstub->Pipeline(&ctx, &summary);
    v1::MicroBatch forged;
    forged.set_batch_id(1);
    writer->Write(forged);
    writer->WritesDone();
    EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
    // Nobody outside the plane joins a tensor-parallel group (and so learns
    // its rendezvous or receives its micro-batches).
    grpc::ClientContext jctx;
    jctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    v1::JoinTpGroupRequest join;
    join.set_tp_rank(1);
    join.set_tp_size(2);
    join.set_port(1);
    auto events = wstub->JoinTpGroup(&jctx, join);
    v1::TpGroupEvent event;
    EXPECT_FALSE(events->Read(&event));
    EXPECT_EQ(events->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  // Worker health stays open for probes.
  EXPECT_TRUE(CheckHealth(cluster->worker_addresses()[0], "spar.v1.Worker").ok());
  EXPECT_TRUE(testing::Stream(stub.get(), Greedy("through the plane"), absl::Seconds(30)).status.ok());
  cluster->KillScheduler();
  EXPECT_FALSE(LogsContain(cluster.get(), token)) << "the worker token reached a log";
}

}  // namespace
}  // namespace spar
