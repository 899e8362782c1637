// MTP speculative decoding in the in-process engine (cpu backend): outputs
// with --num-speculative-tokens 1..4 are the outputs without it (greedy and
// seeded sampling, bf16 and FP8, both architectures, chunked prefill,
// sparse contexts), the drafts really are accepted on a model whose MTP
// layer drafts well, stops and max_tokens mid-draft end where they would
// without speculation and leak no cache block, and the sampled token
// distribution is the target's — a statistical test that a wrong acceptance
// rule fails.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <thread>

#include "base/rng.h"
#include "engine/engine.h"
#include "engine/make_tiny.h"
#include "engine/tensor_parallel.h"
#include "gtest/gtest.h"
#include "tests/engine/test_util.h"

namespace spar {
namespace {

struct MtpModel {
  const char* name;
  ModelArch arch;
  bool fp8;
  bool predictable;  // an MTP layer whose drafts are often right
  bool sampled = true;  // also check seeded sampling
  TinyQuant quant = TinyQuant::kNone;  // 4-bit weights (the MTP layer's own projections stay bf16)
};

std::string MakeMtpModel(const MtpModel& m) {
  MakeTinyOptions o;
  o.arch = m.arch;
  o.fp8 = m.fp8;
  o.quant = m.quant;
  o.mtp = true;
  o.predictable = m.predictable;
  o.seed = 11;
  o.out_dir = testing::TempDir(std::string("spec_") + m.name);
  EXPECT_TRUE(MakeTinyModel(o).ok());
  return o.out_dir;
}

std::unique_ptr<Engine> MakeEngine(const std::string& dir, int k, int64_t max_batch_tokens = 4096,
                                   AcceptanceRule rule = AcceptLongestMatch,
                                   IndexerQueryGemm indexer_query = ModelOptions{}.indexer_query) {
  EngineOptions eo;
  eo.model.num_blocks = 96;
  eo.model.indexer_query = indexer_query;
  eo.num_speculative_tokens = k;
  eo.max_batch_tokens = max_batch_tokens;
  eo.acceptance_rule = std::move(rule);
  auto e = Engine::Create(dir, eo);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

std::vector<int32_t> RandomPrompt(int n, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> p(n);
  for (auto& t : p) t = static_cast<int32_t>(rng.Below(288));
  return p;
}

std::vector<GenerationRequest> Requests(bool sampled) {
  std::vector<GenerationRequest> rs;
  // Short, one beyond index_topk (32: sparse attention in the MTP layer
  // too) and one of a single token (the MTP layer's row at position 0).
  for (auto [len, seed] : {std::pair{7, 1}, std::pair{70, 2}, std::pair{1, 3}}) {
    GenerationRequest r;
    r.prompt = RandomPrompt(len, seed);
    r.max_tokens = 16;
    r.ignore_eos = true;
    r.top_logprobs = 2;
    if (sampled) {
      r.sampling.temperature = 0.9f;
      r.sampling.top_p = 0.95f;
      r.sampling.min_p = 0.02f;
      r.sampling.presence_penalty = 0.4f;
      r.sampling.repetition_penalty = 1.15f;
      r.sampling.frequency_penalty = 0.1f;
      r.seed = 100 + seed;
    } else {
      r.sampling.temperature = 0;
    }
    rs.push_back(r);
  }
  return rs;
}

void ExpectSameGenerations(const std::vector<Generation>& want, const std::vector<Generation>& got,
                           const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(want[i].tokens.size(), got[i].tokens.size()) << what << " request " << i;
    for (size_t t = 0; t < want[i].tokens.size(); ++t) {
      ASSERT_EQ(want[i].tokens[t].id, got[i].tokens[t].id) << what << " request " << i << " token " << t;
      EXPECT_NEAR(want[i].tokens[t].logprob, got[i].tokens[t].logprob, 1e-5) << what << " request " << i;
      ASSERT_EQ(want[i].tokens[t].top.size(), got[i].tokens[t].top.size());
      for (size_t j = 0; j < want[i].tokens[t].top.size(); ++j) {
        EXPECT_EQ(want[i].tokens[t].top[j].first, got[i].tokens[t].top[j].first) << what;
      }
    }
    EXPECT_EQ(want[i].finish, got[i].finish) << what;
    EXPECT_EQ(want[i].stop_token, got[i].stop_token) << what;
  }
}

class SpeculativeIdentityTest : public ::testing::TestWithParam<MtpModel> {};

TEST_P(SpeculativeIdentityTest, OutputsEqualThoseWithoutSpeculation) {
  const std::string dir = MakeMtpModel(GetParam());
  for (bool sampled : {false, true}) {
    if (sampled && !GetParam().sampled) continue;
    const auto requests = Requests(sampled);
    auto plain = MakeEngine(dir, 0);
    ASSERT_NE(plain, nullptr);
    auto want = plain->Generate(requests);
    ASSERT_TRUE(want.ok()) << want.status();
    for (int k = 1; k <= kMaxSpeculativeTokens; ++k) {
      // A small step budget splits the long prompt into chunks (the MTP
      // layer's input at a chunk's end is the next chunk's first token).
      auto spec = MakeEngine(dir, k, /*max_batch_tokens=*/k == 2 ? 24 : 4096);
      ASSERT_NE(spec, nullptr);
      auto got = spec->Generate(requests);
      ASSERT_TRUE(got.ok()) << got.status();
      const std::string what = std::string(GetParam().name) + (sampled ? " sampled" : " greedy") + " k=" +
                               std::to_string(k);
      ExpectSameGenerations(*want, *got, what);
      EXPECT_EQ(spec->allocator().num_free(), spec->allocator().num_blocks()) << what;
      const SpeculationStats& st = spec->speculation_stats();
      EXPECT_GT(st.num_drafts, 0) << what;
      EXPECT_LE(st.num_accepted_tokens, st.num_draft_tokens) << what;
      EXPECT_EQ(st.accepted_per_position[0] >= st.accepted_per_position[k - 1], true) << what;
      if (GetParam().predictable && !sampled) {
        // Drafts are really accepted, so the accept paths ran.
        EXPECT_GT(st.num_accepted_tokens, st.num_drafts / 4) << what;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, SpeculativeIdentityTest,
                         ::testing::Values(MtpModel{"glm5_bf16_predictable", ModelArch::kGlmMoeDsa, false, true},
                                           MtpModel{"glm5_fp8_predictable", ModelArch::kGlmMoeDsa, true, true},
                                           MtpModel{"glm5_bf16_random", ModelArch::kGlmMoeDsa, false, false, false},
                                           MtpModel{"dsv32_fp8_predictable", ModelArch::kDeepseekV32, true, true},
                                           MtpModel{"glm5_awq_predictable", ModelArch::kGlmMoeDsa, false, true, false,
                                                    TinyQuant::kAwq},
                                           MtpModel{"dsv32_nvfp4_predictable", ModelArch::kDeepseekV32, false, true,
                                                    false, TinyQuant::kNvfp4}),
                         [](const auto& info) { return std::string(info.param.name); });

// ModelOptions::indexer_query reaches the MTP layer (a full-indexer layer
// of its own) and the verify steps' multi-token rows: wherever the
// indexer's query GEMM runs, the same tokens, log-probabilities and drafts
// as the separate GEMM on the selection branch, bit for bit.
TEST(SpeculativeTest, IndexerQueryPlacementChangesNoDraftOrToken) {
  const std::string dir = MakeMtpModel({"fused_query", ModelArch::kGlmMoeDsa, true, true});
  const auto requests = Requests(/*sampled=*/true);
  auto on_branch = MakeEngine(dir, 3, 24, AcceptLongestMatch, IndexerQueryGemm::kOnBranch);
  ASSERT_TRUE(on_branch);
  auto want = on_branch->Generate(requests);
  ASSERT_TRUE(want.ok()) << want.status();
  for (IndexerQueryGemm placement : {IndexerQueryGemm::kWithQb, IndexerQueryGemm::kBeforeFork}) {
    const std::string name(IndexerQueryGemmName(placement));
    auto other = MakeEngine(dir, 3, 24, AcceptLongestMatch, placement);
    ASSERT_TRUE(other);
    auto got = other->Generate(requests);
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectSameGenerations(*want, *got, ("indexer query " + name).c_str());
    for (size_t i = 0; i < want->size(); ++i) {
      for (size_t t = 0; t < (*want)[i].tokens.size(); ++t) {
        EXPECT_EQ((*want)[i].tokens[t].logprob, (*got)[i].tokens[t].logprob)
            << name << ", request " << i << " token " << t;
      }
    }
    EXPECT_EQ(on_branch->speculation_stats().num_draft_tokens, other->speculation_stats().num_draft_tokens) << name;
    EXPECT_EQ(on_branch->speculation_stats().num_accepted_tokens, other->speculation_stats().num_accepted_tokens)
        << name;
    EXPECT_GT(other->speculation_stats().num_drafts, 0) << name;
  }
}

TEST(SpeculativeTest, StopsAndMaxTokensMidDraftEndWhereTheyWouldAndLeakNoBlock) {
  const std::string dir = MakeMtpModel({"stops", ModelArch::kGlmMoeDsa, false, true});
  auto plain = MakeEngine(dir, 0);
  auto spec = MakeEngine(dir, 4);
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(spec, nullptr);
  GenerationRequest base;
  base.prompt = RandomPrompt(12, 9);
  base.sampling.temperature = 0;
  base.max_tokens = 30;
  base.ignore_eos = true;
  auto full = plain->Generate({base});
  ASSERT_TRUE(full.ok()) << full.status();
  std::vector<GenerationRequest> cases;
  for (int m : {1, 2, 3, 5, 8}) {  // max_tokens inside a verify step's window
    GenerationRequest r = base;
    r.max_tokens = m;
    cases.push_back(r);
  }
  for (size_t at : {size_t{1}, size_t{4}, size_t{9}}) {  // a stop token in the middle of the output
    GenerationRequest r = base;
    r.stop_token_ids = {(*full)[0].tokens[at].id};
    cases.push_back(r);
  }
  auto want = plain->Generate(cases);
  auto got = spec->Generate(cases);
  ASSERT_TRUE(want.ok() && got.ok());
  ExpectSameGenerations(*want, *got, "stops");
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ((*got)[i].tokens.size(), cases[i].max_tokens);
  EXPECT_EQ((*got)[5].finish, FinishReason::kStop);
  EXPECT_GT(spec->speculation_stats().num_accepted_tokens, 0);
  EXPECT_EQ(spec->allocator().num_free(), spec->allocator().num_blocks());
}

TEST(SpeculativeTest, ModelWithoutMtpLayerIsAClearError) {
  MakeTinyOptions o;
  o.out_dir = testing::TempDir("spec_no_mtp");
  ASSERT_TRUE(MakeTinyModel(o).ok());
  EngineOptions eo;
  eo.num_speculative_tokens = 2;
  auto e = Engine::Create(o.out_dir, eo);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("num_nextn_predict_layers"), std::string::npos) << e.status();
  eo.num_speculative_tokens = 5;
  e = Engine::Create(o.out_dir, eo);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("0 (off) to 4"), std::string::npos) << e.status();
}

// A tensor-parallel group speculates in lockstep: every rank decides the
// same acceptance from the same all-reduced logits (the MTP layer's steps
// hold all-reduces too), and the tokens are those without speculation.
TEST(SpeculativeTest, TensorParallelRanksSpeculateInLockstep) {
  const std::string dir = MakeMtpModel({"tp", ModelArch::kGlmMoeDsa, false, true});
  auto run = [&](int k) {
    constexpr int kSize = 2;
    auto group = std::make_shared<InProcessGroup>(kSize);
    std::vector<absl::StatusOr<std::vector<Generation>>> out(kSize, absl::UnknownError("not run"));
    std::vector<std::thread> ranks;
    for (int r = 0; r < kSize; ++r) {
      ranks.emplace_back([&, r] {
        EngineOptions eo;
        eo.model.num_blocks = 32;
        eo.num_speculative_tokens = k;
        eo.backend_options.tp = TpRank{r, kSize};
        eo.backend_options.cpu_group = group;
        auto engine = Engine::Create(dir, eo);
        out[r] = engine.ok() ? (*engine)->Generate(Requests(true)) : engine.status();
      });
    }
    for (auto& t : ranks) t.join();
    return out;
  };
  const auto plain = run(0);
  const auto spec = run(3);
  ASSERT_TRUE(plain[0].ok()) << plain[0].status();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(spec[r].ok()) << "rank " << r << ": " << spec[r].status();
    ExpectSameGenerations(*plain[0], *spec[r], "TP 2 rank " + std::to_string(r));
  }
}

// ---- the distribution ----

// Upper quantile of chi-square with `df` degrees of freedom at p = 0.001
// (Wilson-Hilferty; good to a few percent for df >= 2).
double ChiSquareCritical(int df) {
  const double z = 3.0902;  // standard normal at 0.999
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

// Two-sample chi-square statistic of equal-size samples over the bins seen
// (bins with fewer than 5 expected observations pooled), and its df.
std::pair<double, int> ChiSquare(const std::map<int32_t, int>& a, const std::map<int32_t, int>& b) {
  std::map<int32_t, std::pair<int, int>> bins;
  for (const auto& [k, n] : a) bins[k].first += n;
  for (const auto& [k, n] : b) bins[k].second += n;
  double stat = 0;
  int used = 0;
  std::pair<int, int> pooled{0, 0};
  auto add = [&](std::pair<int, int> c) {
    stat += static_cast<double>(c.first - c.second) * (c.first - c.second) / (c.first + c.second);
    ++used;
  };
  for (const auto& [k, c] : bins) {
    if (c.first + c.second < 10) {
      pooled.first += c.first;
      pooled.second += c.second;
    } else {
      add(c);
    }
  }
  if (pooled.first + pooled.second > 0) add(pooled);
  return {stat, std::max(1, used - 1)};
}

// Per output position (1..3: tokens a verify step decides), the token counts
// of `n` seeded samples from seeds [seed0, seed0 + n).
std::vector<std::map<int32_t, int>> SampleCounts(Engine& engine, int n, uint64_t seed0) {
  std::vector<GenerationRequest> rs;
  for (int i = 0; i < n; ++i) {
    GenerationRequest r;
    r.prompt = RandomPrompt(3, 77);  // one context, many seeds
    r.sampling.temperature = 1.0f;
    r.sampling.top_k = 5;  // a small support: a few bins per position
    r.sampling.presence_penalty = 0.3f;
    r.max_tokens = 4;
    r.ignore_eos = true;
    r.seed = seed0 + static_cast<uint64_t>(i);
    rs.push_back(r);
  }
  std::vector<std::map<int32_t, int>> counts(4);
  constexpr size_t kBatch = 64;  // sequences per Generate: the cache holds 96 blocks
  for (size_t b = 0; b < rs.size(); b += kBatch) {
    std::vector<GenerationRequest> part(rs.begin() + b, rs.begin() + std::min(rs.size(), b + kBatch));
    auto gen = engine.Generate(part);
    EXPECT_TRUE(gen.ok()) << gen.status();
    if (!gen.ok()) return counts;
    for (const auto& g : *gen) {
      for (size_t p = 0; p < g.tokens.size() && p < 4; ++p) counts[p][g.tokens[p].id]++;
    }
  }
  return counts;
}

// The largest statistic / critical value over positions 1..3.
double WorstChiSquareRatio(const std::vector<std::map<int32_t, int>>& a, const std::vector<std::map<int32_t, int>>& b) {
  double worst = 0;
  for (int p = 1; p < 4; ++p) {
    auto [stat, df] = ChiSquare(a[p], b[p]);
    worst = std::max(worst, stat / ChiSquareCritical(df));
  }
  return worst;
}

TEST(SpeculativeDistributionTest, SampledTokensFollowTheTargetAndAWrongRuleIsCaught) {
  const std::string dir = MakeMtpModel({"dist", ModelArch::kGlmMoeDsa, false, true});
  constexpr int kSamples = 200;
  auto plain = MakeEngine(dir, 0);
  ASSERT_NE(plain, nullptr);
  // Independent reference samples: other seeds than the speculative runs.
  const auto reference = SampleCounts(*plain, kSamples, 1'000'000);
  auto spec = MakeEngine(dir, 2);
  const auto right = SampleCounts(*spec, kSamples, 1);
  const double ok = WorstChiSquareRatio(reference, right);
  EXPECT_LT(ok, 1.0) << "speculative sampling moved the distribution (chi-square / critical at p=0.001)";
  EXPECT_GT(spec->speculation_stats().num_accepted_tokens, kSamples / 8);  // the accept path ran

  // Wrong rules the test must catch: accepting every draft, and always
  // accepting the first draft (only position 1 is biased).
  AcceptanceRule all = [](const std::vector<int32_t>& d, const std::vector<int32_t>&) {
    return static_cast<int>(d.size());
  };
  AcceptanceRule first = [](const std::vector<int32_t>& d, const std::vector<int32_t>& y) {
    if (d.empty()) return 0;
    std::vector<int32_t> rest_d(d.begin() + 1, d.end()), rest_y(y.begin() + 1, y.end());
    return 1 + AcceptLongestMatch(rest_d, rest_y);
  };
  for (const auto& [name, rule] : {std::pair{"accept all", all}, std::pair{"accept the first", first}}) {
    auto wrong = MakeEngine(dir, 2, 4096, rule);
    const auto biased = SampleCounts(*wrong, kSamples, 1);
    const double ratio = WorstChiSquareRatio(reference, biased);
    std::printf("%s: chi-square / critical %.2f (the right rule: %.2f)\n", name, ratio, ok);
    EXPECT_GT(ratio, 1.0) << name << ": the wrong rule was not detected";
  }
}

}  // namespace
}  // namespace spar
