// Load: a bounded soak over loopback gRPC against a real 3-stage cluster
// (cpu backend), and the admission queue's bound. What must hold:
//   * every one of 2,000 requests (64 in flight at a time) ends OK with its
//     own id, exactly max_tokens tokens, one finish and one usage message:
//     no stream lost, duplicated or crossed with another;
//   * a sample of them equals the single-process engine exactly;
//   * every tenth shares a prefix of full blocks with others (prefix
//     caching is on, the default): hits happen, outputs stay exact;
//   * afterwards no KV block is held, and the scheduler's and workers'
//     resident memory after warm-up stays within 10%;
//   * all of it with MTP speculative decoding on (3 drafts, a model whose
//     drafts are often right): requests end mid-draft at max_tokens, and
//     the sample still equals the engine without speculation;
//   * past the queue bound, requests are shed with RESOURCE_EXHAUSTED at
//     once instead of queueing without bound, and the rest are served.
// Sizes come from SPAR_SOAK_REQUESTS / SPAR_SOAK_CONCURRENCY (defaults
// 2000 / 64, one to three minutes on 2 busy cores).
#include <httplib.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>

#include "base/sanitizers.h"
#include "engine/make_tiny.h"
#include "gtest/gtest.h"
#include "services/common/daemon.h"
#include "tests/engine/shared_tiny_model.h"
#include "tests/reliability/grpc_client_util.h"
#include "tests/services/metrics_scrape.h"
#include "tests/services/mixed_requests.h"
#include "tests/services/test_cluster.h"

namespace spar {
namespace {

using testing::ReliabilityModel;

// The soak's model: with an MTP layer that drafts well (make-tiny --mtp
// --predictable), so the cluster speculates and accepts drafts.
const std::string& SpeculativeModel() { return testing::SharedTinyModel("soak_mtp_model", MakeTinyOptions{.seed = 11, .mtp = true, .predictable = true}); }

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

// Request i of the soak: short prompts and outputs (the soak is about the
// serving machinery, not the model), greedy or seeded, deterministic. Every
// tenth first resends one of three conversation prefixes (one full block or
// more), so concurrent streams share cached blocks.
GenerationRequest SoakRequest(int i) {
  GenerationRequest r;
  if (i % 10 == 4) {
    const int k = (i / 10) % 3;
    for (int t = 0; t < 64 + 30 * k; ++t) r.prompt.push_back(static_cast<int32_t>((k * 41 + t * 23) % 288));
  }
  const int len = 1 + (i * 7) % 12;
  for (int t = 0; t < len; ++t) r.prompt.push_back(static_cast<int32_t>((i * 13 + t * 29) % 288));
  r.sampling.temperature = i % 3 == 0 ? 0.0f : 0.8f;
  r.sampling.top_k = i % 3 == 2 ? 20 : 0;
  r.seed = 9000 + i;
  r.max_tokens = 1 + i % 4;
  r.ignore_eos = true;
  return r;
}

struct Memory {
  int64_t scheduler = 0;
  std::vector<int64_t> workers;
};

Memory Measure(testing::TestCluster* cluster) {
  Memory m;
  m.scheduler = testing::RssKiB(cluster->scheduler()->pid());
  for (int i = 0; i < 3; ++i) m.workers.push_back(testing::RssKiB(cluster->worker(i)->pid()));
  return m;
}

TEST(SoakTest, TwoThousandStreamsNoneLostOrDuplicatedNoLeaks) {
  const int total = EnvInt("SPAR_SOAK_REQUESTS", 2000);
  const int concurrency = EnvInt("SPAR_SOAK_CONCURRENCY", 64);
  const int warmup = std::min(total / 10, 200);
  // A reference sample: every 50th request, and every 50th with a shared prefix.
  std::vector<int> sample;
  std::vector<GenerationRequest> sample_requests;
  for (int i = 0; i < total; i += 50) {
    for (int j : {i, i + 4}) {
      if (j >= total) continue;
      sample.push_back(j);
      sample_requests.push_back(SoakRequest(j));
    }
  }
  const auto want = testing::EngineReference(SpeculativeModel(), sample_requests);  // without speculation
  ASSERT_EQ(want.size(), sample.size());

  const std::vector<std::string> speculate = {"--num-speculative-tokens", "3"};
  std::vector<std::string> scheduler_flags = {"--max-queue", "256"};
  scheduler_flags.insert(scheduler_flags.end(), speculate.begin(), speculate.end());
  auto cluster = testing::TestCluster::Start({.model = SpeculativeModel(),
                                              .stages = 3,
                                              .num_blocks = 128,
                                              .scheduler_flags = scheduler_flags,
                                              .worker_flags = speculate},
                                             "soak");
  ASSERT_NE(cluster, nullptr);
  auto stub = v1::Generation::NewStub(CreatePublicChannel(cluster->address()));

  std::vector<testing::StreamRecord> records(total);
  std::atomic<int> next{0}, done{0};
  std::mutex mu;
  Memory after_warmup;
  bool measured = false;
  const absl::Time start = absl::Now();
  std::vector<std::thread> clients;
  for (int c = 0; c < concurrency; ++c) {
    clients.emplace_back([&] {
      for (int i = next++; i < total; i = next++) {
        records[i] = testing::Stream(stub.get(), testing::ToWire(SoakRequest(i), absl::StrCat("soak-", i)),
                                     testing::Scaled(absl::Seconds(120)));
        if (++done == warmup) {
          std::lock_guard<std::mutex> lock(mu);
          after_warmup = Measure(cluster.get());
          measured = true;
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  const absl::Duration took = absl::Now() - start;

  int failed = 0;
  std::set<std::string> ids;
  for (int i = 0; i < total; ++i) {
    const auto& r = records[i];
    const int max_tokens = SoakRequest(i).max_tokens;
    if (!r.status.ok()) {
      if (++failed <= 5) ADD_FAILURE() << "request " << i << ": " << r.status.error_message();
      continue;
    }
    EXPECT_EQ(r.request_id, absl::StrCat("soak-", i));
    EXPECT_FALSE(r.id_mismatch) << "request " << i << " received another request's message";
    EXPECT_EQ(static_cast<int>(r.ids.size()), max_tokens) << "request " << i;
    EXPECT_EQ(r.finishes, 1) << "request " << i;
    EXPECT_EQ(r.usages, 1) << "request " << i;
    EXPECT_EQ(r.finish.num_output_tokens(), static_cast<uint32_t>(max_tokens)) << "request " << i;
    ids.insert(r.request_id);
  }
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(static_cast<int>(ids.size()), total - failed) << "duplicated stream ids";
  for (size_t k = 0; k < sample.size(); ++k) {
    EXPECT_EQ(records[sample[k]].ids, testing::Ids(want[k])) << "request " << sample[k];
  }

  // Nothing held afterwards.
  EXPECT_LT(testing::TimeUntilIdle(stub.get(), absl::Seconds(5)), absl::Seconds(5));
  const auto load = testing::Load(stub.get());
  EXPECT_EQ(load.used_kv_blocks(), 0);
  EXPECT_EQ(load.total_kv_blocks(), 128);
  // Drafts were verified and accepted (vLLM's spec-decode counters).
  const int port = cluster->scheduler_metrics_port();
  EXPECT_GT(testing::ScrapeMetric(port, "vllm:spec_decode_num_draft_tokens_total"), 0);
  EXPECT_GT(testing::ScrapeMetric(port, "vllm:spec_decode_num_accepted_tokens_total"), 0);
  const double hits = testing::ScrapeMetric(port, "vllm:prefix_cache_hits_total");
  EXPECT_GT(hits, 0) << "the shared prefixes were never shared";

  // Memory flat after warm-up (within 10%).
  ASSERT_TRUE(measured);
  const Memory end = Measure(cluster.get());
  std::cout << "[soak] " << total << " requests at " << concurrency << " concurrent in " << took << " ("
            << total / absl::ToDoubleSeconds(took) << " req/s), " << load.num_micro_batches()
            << " micro-batches, " << hits << " prompt tokens shared from the prefix cache; RSS KiB scheduler " << after_warmup.scheduler << " -> " << end.scheduler;
  for (int w = 0; w < 3; ++w) std::cout << ", worker" << w << " " << after_warmup.workers[w] << " -> " << end.workers[w];
  std::cout << "\n";
  // Under ASan freed memory waits in its quarantine (up to 256 MiB), so
  // resident memory says nothing about leaks there; LeakSanitizer does.
  if (!kAsanBuild) {
    EXPECT_LE(end.scheduler, after_warmup.scheduler * 11 / 10) << "scheduler memory grew";
    for (int w = 0; w < 3; ++w) {
      EXPECT_LE(end.workers[w], after_warmup.workers[w] * 11 / 10) << "worker " << w << " memory grew";
    }
  }
}

TEST(SoakTest, QueueBoundShedsWithResourceExhaustedAndServesTheRest) {
  // At most 4 sequences running and 8 waiting; 64 clients arrive at once.
  auto cluster = testing::TestCluster::Start({.model = ReliabilityModel(),
                                              .stages = 3,
                                              .num_blocks = 64,
                                              .delay_per_layer_ms = 5,
                                              .scheduler_flags = {"--max-running", "4", "--max-queue", "8"}},
                                             "shed");
  ASSERT_NE(cluster, nullptr);
  auto stub = v1::Generation::NewStub(CreatePublicChannel(cluster->address()));
  constexpr int kClients = 64;
  std::vector<testing::StreamRecord> records(kClients);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      GenerationRequest r = SoakRequest(i);
      r.max_tokens = 16;
      records[i] = testing::Stream(stub.get(), testing::ToWire(r, absl::StrCat("burst-", i)), absl::Seconds(60));
    });
  }
  for (auto& t : clients) t.join();
  int ok = 0, shed = 0;
  for (int i = 0; i < kClients; ++i) {
    const auto& r = records[i];
    if (r.status.ok()) {
      ++ok;
      EXPECT_EQ(r.ids.size(), 16u);
    } else {
      EXPECT_EQ(r.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << r.status.error_message();
      EXPECT_EQ(r.messages, 0);
      EXPECT_LT(r.end - r.start, absl::Seconds(1)) << "shedding must not wait";
      ++shed;
    }
  }
  std::cout << "[shed] " << ok << " served, " << shed << " shed with RESOURCE_EXHAUSTED\n";
  EXPECT_GT(shed, 0);
  // At least the queue's worth: the 64 arrive faster than anything starts
  // running, so the first 8 are queued and the rest shed until room frees.
  EXPECT_GE(ok, 8);
  EXPECT_LT(testing::TimeUntilIdle(stub.get(), absl::Seconds(5)), absl::Seconds(5));

  // The same burst over HTTP: 429 with OpenAI's rate-limit error.
  const std::string& http = cluster->http_address();
  std::vector<int> statuses(kClients);
  std::vector<std::string> bodies(kClients);
  clients.clear();
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      httplib::Client web(http.substr(0, http.rfind(':')), std::stoi(http.substr(http.rfind(':') + 1)));
      web.set_read_timeout(60, 0);
      auto r = web.Post("/v1/completions", R"({"prompt": [5, 6, 7], "max_tokens": 16, "ignore_eos": true})",
                        "application/json");
      statuses[i] = r ? r->status : -1;
      bodies[i] = r ? r->body : httplib::to_string(r.error());
    });
  }
  for (auto& t : clients) t.join();
  int http_ok = 0, http_shed = 0;
  for (int i = 0; i < kClients; ++i) {
    if (statuses[i] == 200) {
      ++http_ok;
    } else {
      EXPECT_EQ(statuses[i], 429) << bodies[i];
      EXPECT_NE(bodies[i].find("queue_full"), std::string::npos) << bodies[i];
      ++http_shed;
    }
  }
  std::cout << "[shed] HTTP: " << http_ok << " served, " << http_shed << " shed with 429\n";
  EXPECT_GT(http_shed, 0);
  EXPECT_GE(http_ok, 8);
  EXPECT_LT(testing::TimeUntilIdle(stub.get(), absl::Seconds(5)), absl::Seconds(5));
}

}  // namespace
}  // namespace spar
