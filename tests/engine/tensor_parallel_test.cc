// Tensor/expert parallelism on the cpu backend: a TP group of threads (the
// sharding the cuda backend uses, with an in-process all-reduce) must give
// the TP 1 logits up to fp32 summation order, and the same greedy tokens.
#include "engine/tensor_parallel.h"

#include <cmath>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/rng.h"
#include "engine/engine.h"
#include "engine/make_tiny.h"
#include "gtest/gtest.h"
#include "tests/engine/test_util.h"

namespace spar {
namespace {

TEST(EvenSliceTest, SplitsEvenlyAndNamesWhatDoesNotDivide) {
  auto s = EvenSlice(16, TpRank{3, 4}, "attention heads");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->begin, 12);
  EXPECT_EQ(s->end, 16);
  auto bad = EvenSlice(16, TpRank{0, 3}, "attention heads");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("does not divide the 16 attention heads"), std::string::npos);
  EXPECT_FALSE(EvenSlice(16, TpRank{2, 2}, "x").ok());
  EXPECT_FALSE(EvenSlice(16, TpRank{0, 0}, "x").ok());
}

TEST(InProcessGroupTest, EveryRankGetsTheSameSum) {
  constexpr int kRanks = 4, kN = 1000, kRounds = 50;
  InProcessGroup group(kRanks);
  std::vector<std::vector<float>> data(kRanks, std::vector<float>(kN));
  std::vector<std::thread> threads;
  std::vector<absl::Status> status(kRanks);
  std::vector<double> max_err(kRanks, 0);
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      Rng rng(100 + r);
      for (int round = 0; round < kRounds; ++round) {
        auto& d = data[r];
        for (int i = 0; i < kN; ++i) d[i] = static_cast<float>(r + 1) * (i + round);
        if (auto s = group.AllReduceSum(r, d.data(), kN); !s.ok()) status[r] = s;
        // sum over ranks of (r+1)(i+round) = 10 (i + round)
        for (int i = 0; i < kN; ++i) max_err[r] = std::max(max_err[r], std::abs(d[i] - 10.0 * (i + round)));
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_TRUE(status[r].ok()) << status[r];
    EXPECT_EQ(max_err[r], 0) << "rank " << r;
    EXPECT_EQ(data[r], data[0]) << "rank " << r << " differs from rank 0";
  }
}

TEST(InProcessGroupTest, MismatchedSizeFailsWithoutHanging) {
  InProcessGroup group(2);
  std::vector<float> a(10, 1.0f), b(12, 1.0f);
  absl::Status sa, sb;
  std::thread t([&] { sb = group.AllReduceSum(1, b.data(), b.size()); });
  sa = group.AllReduceSum(0, a.data(), a.size());
  t.join();
  EXPECT_TRUE(sa.ok());  // rank 0 defines the size
  EXPECT_FALSE(sb.ok());
}

struct TpCase {
  const char* name;
  ModelArch arch;
  bool fp8;
  TinyQuant quant = TinyQuant::kNone;  // 4-bit: ranks slice packed matrices
};

class TensorParallelTest : public ::testing::TestWithParam<TpCase> {
 protected:
  static std::string MakeModel(const TpCase& c) {
    MakeTinyOptions o;
    o.arch = c.arch;
    o.fp8 = c.fp8;
    o.quant = c.quant;
    o.seed = 11;
    o.out_dir = testing::TempDir(std::string("tp_") + c.name);
    EXPECT_TRUE(MakeTinyModel(o).ok());
    return o.out_dir;
  }
};

struct RankResult {
  absl::Status status;
  std::vector<std::vector<std::vector<float>>> logits;
  std::vector<std::vector<int32_t>> tokens;
};

// Runs the same work on every rank of a TP group of `size` threads.
std::vector<RankResult> RunGroup(const std::string& dir, int size, const std::vector<std::vector<int32_t>>& prompts,
                                 const std::vector<GenerationRequest>& requests,
                                 IndexerQueryGemm indexer_query = ModelOptions{}.indexer_query) {
  auto group = std::make_shared<InProcessGroup>(size);
  std::vector<RankResult> results(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      EngineOptions eo;
      eo.model.num_blocks = 64;
      eo.model.indexer_query = indexer_query;
      eo.backend_options.tp = TpRank{r, size};
      eo.backend_options.cpu_group = group;
      auto engine = Engine::Create(dir, eo);
      if (!engine.ok()) {
        // A failed rank would leave the others waiting in an all-reduce;
        // the setups here fail (or not) identically on every rank.
        results[r].status = engine.status();
        return;
      }
      auto logits = (*engine)->PromptLogits(prompts, 4);
      if (!logits.ok()) {
        results[r].status = logits.status();
        return;
      }
      results[r].logits = std::move(*logits);
      auto gen = (*engine)->Generate(requests);
      if (!gen.ok()) {
        results[r].status = gen.status();
        return;
      }
      for (const auto& g : *gen) {
        std::vector<int32_t> ids;
        for (const auto& t : g.tokens) ids.push_back(t.id);
        results[r].tokens.push_back(ids);
      }
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

// Greedy requests of `max_tokens` tokens past EOS, one per prompt.
std::vector<GenerationRequest> GreedyRequests(const std::vector<std::vector<int32_t>>& prompts, int max_tokens) {
  std::vector<GenerationRequest> requests(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    requests[i].prompt = prompts[i];
    requests[i].sampling.temperature = 0;
    requests[i].max_tokens = max_tokens;
    requests[i].ignore_eos = true;
  }
  return requests;
}

TEST_P(TensorParallelTest, TpGroupsMatchTp1) {
  const std::string dir = MakeModel(GetParam());
  // 70 tokens: beyond index_topk (32), so the sparse path runs.
  const std::vector<std::vector<int32_t>> prompts = {testing::RandomTokens(70, 1), testing::RandomTokens(9, 2)};
  const std::vector<GenerationRequest> requests = GreedyRequests(prompts, 8);
  const auto base = RunGroup(dir, 1, prompts, requests);
  ASSERT_TRUE(base[0].status.ok()) << base[0].status;
  // 8: the full node's TP/EP 8 (tiny: 2 heads and 2 experts per rank).
  for (int size : {2, 4, 8}) {
    const auto tp = RunGroup(dir, size, prompts, requests);
    for (int r = 0; r < size; ++r) {
      ASSERT_TRUE(tp[r].status.ok()) << "TP " << size << " rank " << r << ": " << tp[r].status;
      // Every rank holds the same (all-reduced) logits.
      EXPECT_EQ(tp[r].logits, tp[0].logits) << "TP " << size << " rank " << r;
      EXPECT_EQ(tp[r].tokens, base[0].tokens) << "TP " << size << " rank " << r;
    }
    double worst = 0;
    for (size_t p = 0; p < prompts.size(); ++p) {
      for (size_t row = 0; row < base[0].logits[p].size(); ++row) {
        const auto& want = base[0].logits[p][row];
        const auto& got = tp[0].logits[p][row];
        ASSERT_EQ(want.size(), got.size());
        double num = 0, den = 0;
        for (size_t i = 0; i < want.size(); ++i) {
          num += (got[i] - want[i]) * (got[i] - want[i]);
          den += want[i] * want[i];
        }
        worst = std::max(worst, std::sqrt(num / den));
      }
    }
    EXPECT_LT(worst, 1e-5) << "TP " << size << " logits differ from TP 1";
    // The sharding must actually be exercised: exact equality would mean the
    // ranks did the whole work (fp32 sums in another order differ slightly).
    EXPECT_GT(worst, 0) << "TP " << size << " logits are bit-identical to TP 1";
  }
}

// ModelOptions::indexer_query: with kWithQb the indexer's wq_b rows follow
// this rank's q_b rows in one weight; kBeforeFork runs the indexer's own
// GEMM before the branches. Each output column is still its own dot product
// on the cpu, so logits and tokens are bit-identical to the separate GEMM on
// the selection branch, at TP 1 and with q_b sliced by heads beside the
// replicated indexer.
TEST_P(TensorParallelTest, IndexerQueryPlacementChangesNothing) {
  const std::string dir = MakeModel(GetParam());
  const std::vector<std::vector<int32_t>> prompts = {testing::RandomTokens(70, 3), testing::RandomTokens(41, 4)};
  const std::vector<GenerationRequest> requests = GreedyRequests(prompts, 6);
  for (int size : {1, 2}) {
    const auto on_branch = RunGroup(dir, size, prompts, requests, IndexerQueryGemm::kOnBranch);
    for (IndexerQueryGemm placement : {IndexerQueryGemm::kWithQb, IndexerQueryGemm::kBeforeFork}) {
      const auto other = RunGroup(dir, size, prompts, requests, placement);
      for (int r = 0; r < size; ++r) {
        const std::string where =
            absl::StrCat(IndexerQueryGemmName(placement), ", TP ", size, " rank ", r);
        ASSERT_TRUE(on_branch[r].status.ok()) << where << ": " << on_branch[r].status;
        ASSERT_TRUE(other[r].status.ok()) << where << ": " << other[r].status;
        EXPECT_EQ(other[r].logits, on_branch[r].logits) << where;
        EXPECT_EQ(other[r].tokens, on_branch[r].tokens) << where;
      }
    }
  }
}

// engine_bench --indexer-query: every placement's name parses back to it;
// anything else is refused naming the value and the accepted names.
TEST(IndexerQueryGemmNames, RoundTripAndUnknownNamesAreRefused) {
  for (IndexerQueryGemm p : {IndexerQueryGemm::kWithQb, IndexerQueryGemm::kBeforeFork, IndexerQueryGemm::kOnBranch}) {
    auto parsed = ParseIndexerQueryGemm(IndexerQueryGemmName(p));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, p);
  }
  for (const char* bad : {"", "fused", "With-Qb", "on-branch "}) {
    auto parsed = ParseIndexerQueryGemm(bad);
    ASSERT_FALSE(parsed.ok()) << "\"" << bad << "\"";
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(absl::StrCat("\"", bad, "\"")), std::string::npos) << parsed.status();
    EXPECT_NE(parsed.status().message().find("before-fork"), std::string::npos) << parsed.status();
  }
}

// engine_bench --weight-tiling's input path (BackendOptions::gemm_weight_tiling).
TEST(GemmWeightTilingNames, RoundTripAndUnknownNamesAreRefused) {
  for (GemmWeightTiling t : {GemmWeightTiling::kRowMajor, GemmWeightTiling::kAlongK, GemmWeightTiling::kAcrossRows}) {
    auto parsed = ParseGemmWeightTiling(GemmWeightTilingName(t));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, t);
  }
  for (const char* bad : {"", "tiled", "Along-K", "across-rows "}) {
    auto parsed = ParseGemmWeightTiling(bad);
    ASSERT_FALSE(parsed.ok()) << "\"" << bad << "\"";
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(absl::StrCat("\"", bad, "\"")), std::string::npos) << parsed.status();
    EXPECT_NE(parsed.status().message().find("across-rows"), std::string::npos) << parsed.status();
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, TensorParallelTest,
                         ::testing::Values(TpCase{"glm5_bf16", ModelArch::kGlmMoeDsa, false},
                                           TpCase{"glm5_fp8", ModelArch::kGlmMoeDsa, true},
                                           TpCase{"dsv32_fp8", ModelArch::kDeepseekV32, true},
                                           TpCase{"glm5_awq", ModelArch::kGlmMoeDsa, false, TinyQuant::kAwq},
                                           TpCase{"glm5_int4_ct", ModelArch::kGlmMoeDsa, false, TinyQuant::kInt4Ct},
                                           TpCase{"glm5_nvfp4", ModelArch::kGlmMoeDsa, false, TinyQuant::kNvfp4}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(TensorParallelErrors, SizeThatDoesNotDivideHeadsIsRejected) {
  MakeTinyOptions o;
  o.arch = ModelArch::kGlmMoeDsa;
  o.seed = 3;
  o.out_dir = testing::TempDir("tp_bad");
  ASSERT_TRUE(MakeTinyModel(o).ok());
  auto group = std::make_shared<InProcessGroup>(3);
  EngineOptions eo;
  eo.model.num_blocks = 8;
  eo.backend_options.tp = TpRank{0, 3};
  eo.backend_options.cpu_group = group;
  auto engine = Engine::Create(o.out_dir, eo);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("attention heads"), std::string::npos) << engine.status();
}

}  // namespace
}  // namespace spar
