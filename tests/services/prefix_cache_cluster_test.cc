// Prefix caching on a real local cluster (scheduler + 2 stage workers,
// separate processes, cpu backend): a second request that shares a long
// prefix with the first computes only its suffix, as the scheduler's
// prefill-token counter and prefix-cache metrics and the request's usage
// say, and gets the tokens a scheduler without caching
// (--no-enable-prefix-caching) gives it. The time to first token of both
// is printed (the ratio is the point of caching, but timing is not asserted
// in CI).
#include "gtest/gtest.h"
#include "services/common/daemon.h"
#include "tests/reliability/grpc_client_util.h"
#include "tests/services/metrics_scrape.h"
#include "tests/services/test_cluster.h"

namespace spar {
namespace {

using testing::ReliabilityModel;

std::vector<int32_t> Ids(int n, int salt) {
  std::vector<int32_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = (i * 37 + salt * 11) % 288;
  return ids;
}

GenerationRequest Greedy(std::vector<int32_t> prompt) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0;
  r.max_tokens = 4;
  r.ignore_eos = true;
  r.seed = 1;
  return r;
}

struct Counters {
  double prefill = 0, queries = 0, hits = 0;
};

Counters Scrape(testing::TestCluster* cluster) {
  const int port = cluster->scheduler_metrics_port();
  return {testing::ScrapeMetric(port, "spar_prefill_tokens_total"),
          testing::ScrapeMetric(port, "vllm:prefix_cache_queries_total"),
          testing::ScrapeMetric(port, "vllm:prefix_cache_hits_total")};
}

TEST(PrefixCacheClusterTest, ASecondRequestSharingALongPrefixComputesOnlyItsSuffix) {
  constexpr int kPrefix = 1024, kSuffixA = 24, kSuffixB = 40;
  const std::vector<int32_t> prefix = Ids(kPrefix, 1);
  std::vector<int32_t> a = prefix, b = prefix;
  const std::vector<int32_t> sa = Ids(kSuffixA, 2), sb = Ids(kSuffixB, 3);
  a.insert(a.end(), sa.begin(), sa.end());
  b.insert(b.end(), sb.begin(), sb.end());
  auto cluster = testing::TestCluster::Start(
      {.model = ReliabilityModel(), .stages = 2, .num_blocks = 64, .scheduler_flags = {"--max-batch-tokens", "2048"}},
      "prefix_cluster");
  ASSERT_NE(cluster, nullptr);
  auto stub = v1::Generation::NewStub(CreatePublicChannel(cluster->address()));
  const Counters c0 = Scrape(cluster.get());
  const absl::Duration deadline = testing::Scaled(absl::Seconds(120));
  const testing::StreamRecord ra = testing::Stream(stub.get(), testing::ToWire(Greedy(a), "first"), deadline);
  ASSERT_TRUE(ra.status.ok()) << ra.status.error_message();
  const Counters c1 = Scrape(cluster.get());
  const testing::StreamRecord rb = testing::Stream(stub.get(), testing::ToWire(Greedy(b), "second"), deadline);
  ASSERT_TRUE(rb.status.ok()) << rb.status.error_message();
  const Counters c2 = Scrape(cluster.get());
  EXPECT_EQ(c1.prefill - c0.prefill, kPrefix + kSuffixA);
  EXPECT_EQ(c2.prefill - c1.prefill, kSuffixB) << "the second request computes only its suffix";
  EXPECT_EQ(c2.queries - c1.queries, kPrefix + kSuffixB);
  EXPECT_EQ(c2.hits - c1.hits, kPrefix);
  EXPECT_EQ(ra.usage.cached_prompt_tokens(), 0u);
  EXPECT_EQ(rb.usage.cached_prompt_tokens(), static_cast<uint32_t>(kPrefix));
  EXPECT_EQ(rb.usage.prompt_tokens(), static_cast<uint32_t>(kPrefix + kSuffixB));
  const absl::Duration ttft_a = ra.first_message - ra.start, ttft_b = rb.first_message - rb.start;
  std::cout << "[prefix cache] time to first token: " << ttft_a << " computing " << kPrefix + kSuffixA
            << " prompt tokens, " << ttft_b << " sharing " << kPrefix << " of " << kPrefix + kSuffixB
            << " (ratio " << absl::FDivDuration(ttft_b, ttft_a) << ")\n";

  // The same request on a scheduler without prefix caching: computed in
  // full, the same tokens.
  ASSERT_TRUE(cluster->StartScheduler({"--max-batch-tokens", "2048", "--no-enable-prefix-caching"}));
  stub = v1::Generation::NewStub(CreatePublicChannel(cluster->address()));
  const Counters d0 = Scrape(cluster.get());
  const testing::StreamRecord rc = testing::Stream(stub.get(), testing::ToWire(Greedy(b), "uncached"), deadline);
  ASSERT_TRUE(rc.status.ok()) << rc.status.error_message();
  const Counters d1 = Scrape(cluster.get());
  EXPECT_EQ(rc.ids, rb.ids) << "the cached prefix changed the output";
  EXPECT_EQ(rc.usage.cached_prompt_tokens(), 0u);
  EXPECT_EQ(d1.prefill - d0.prefill, kPrefix + kSuffixB);
  EXPECT_EQ(d1.queries, 0) << "no lookups without prefix caching";
  std::cout << "[prefix cache] without caching the second request's first token took " << rc.first_message - rc.start
            << "\n";
}

}  // namespace
}  // namespace spar
