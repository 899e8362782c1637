// MTP speculative decoding on the cuda backend (GPU test: SKIPPED without an
// sm80+ GPU). What must hold:
//   * greedy outputs with --num-speculative-tokens 1..4 are token-identical
//     to the cuda backend's own outputs without speculation (bf16 and FP8,
//     GLM-5 and DeepSeek-V3.2 make-tiny variants with an MTP layer that
//     drafts well, contexts below and beyond index_topk);
//   * verify steps (1 + drafts tokens per sequence) and the MTP layer's
//     steps are captured and replayed as CUDA graphs, and replaying gives
//     the outputs the eager steps give;
//   * drafts are accepted (the accept paths ran on the GPU).
// On a mismatch the test prints the cpu reference's top-2 logit gap at the
// first differing position: bf16 rounding in a verify step's GEMMs
// (several rows per sequence instead of one) can flip a near-tie, which is
// numerics, not a wrong acceptance; a gap far above bf16 noise is a bug.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/make_tiny.h"
#include "gtest/gtest.h"
#include "tests/engine/test_util.h"
#include "tests/kernels/gpu_test_util.h"

namespace spar {
namespace {

struct Variant {
  const char* name;
  ModelArch arch;
  bool fp8;
};

class SpeculativeGpuTest : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    SPAR_REQUIRE_GPU();
    MakeTinyOptions o;
    o.arch = GetParam().arch;
    o.fp8 = GetParam().fp8;
    o.mtp = true;
    o.predictable = true;
    o.seed = 21;
    o.out_dir = testing::TempDir(std::string("spec_gpu_") + GetParam().name);
    ASSERT_TRUE(MakeTinyModel(o).ok());
    dir_ = o.out_dir;
  }

  std::unique_ptr<Engine> MakeEngine(const std::string& backend, int k, bool eager = false) {
    EngineOptions eo;
    eo.backend = backend;
    eo.model.num_blocks = 64;
    eo.num_speculative_tokens = k;
    eo.backend_options.enforce_eager = eager;
    auto e = Engine::Create(dir_, eo);
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? std::move(*e) : nullptr;
  }

  static std::vector<GenerationRequest> Requests() {
    std::vector<GenerationRequest> rs;
    for (int len : {5, 40, 90}) {  // index_topk is 32: dense and sparse contexts
      GenerationRequest r;
      for (int i = 0; i < len; ++i) r.prompt.push_back((i * 53 + len * 7) % 288);
      r.sampling.temperature = 0;
      r.max_tokens = 24;
      r.ignore_eos = true;
      rs.push_back(r);
    }
    return rs;
  }

  // Explains a mismatch: the cpu reference's top-2 gap at the first
  // differing position of request i.
  std::string Explain(const GenerationRequest& r, const Generation& want, const Generation& got) {
    size_t j = 0;
    while (j < want.tokens.size() && j < got.tokens.size() && want.tokens[j].id == got.tokens[j].id) ++j;
    auto cpu = MakeEngine("cpu", 0);
    if (!cpu) return "no cpu engine";
    std::vector<int32_t> prefix = r.prompt;
    for (size_t i = 0; i < j; ++i) prefix.push_back(want.tokens[i].id);
    auto logits = cpu->PromptLogits({prefix}, 1);
    if (!logits.ok()) return std::string(logits.status().message());
    std::vector<float> row = (*logits)[0][0];
    std::vector<float> sorted = row;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    double scale = 0;
    for (float v : row) scale = std::max(scale, std::fabs(double(v)));
    return absl::StrCat("first difference at output ", j, ": plain ", want.tokens[j].id, ", speculative ",
                        got.tokens[j].id, "; cpu reference top-2 gap ", sorted[0] - sorted[1], " (", 
                        (sorted[0] - sorted[1]) / scale, " of the logit scale)");
  }

  std::string dir_;
};

TEST_P(SpeculativeGpuTest, GreedyEqualsPlainGreedyForEveryDraftCount) {
  const auto requests = Requests();
  auto plain = MakeEngine("cuda", 0);
  ASSERT_NE(plain, nullptr);
  auto want = plain->Generate(requests);
  ASSERT_TRUE(want.ok()) << want.status();
  for (int k = 1; k <= kMaxSpeculativeTokens; ++k) {
    auto spec = MakeEngine("cuda", k);
    ASSERT_NE(spec, nullptr);
    auto got = spec->Generate(requests);
    ASSERT_TRUE(got.ok()) << got.status();
    for (size_t i = 0; i < requests.size(); ++i) {
      std::vector<int32_t> a, b;
      for (const auto& t : (*want)[i].tokens) a.push_back(t.id);
      for (const auto& t : (*got)[i].tokens) b.push_back(t.id);
      EXPECT_EQ(a, b) << GetParam().name << " k=" << k << " request " << i << ": "
                      << (a == b ? "" : Explain(requests[i], (*want)[i], (*got)[i]));
    }
    const SpeculationStats& st = spec->speculation_stats();
    std::cout << GetParam().name << " k=" << k << ": " << st.num_drafts << " verify steps, " << st.num_accepted_tokens
              << "/" << st.num_draft_tokens << " drafts accepted, mean acceptance length "
              << st.mean_acceptance_length() << "; graphs " << spec->model().backend()->graph_stats().captures
              << " captured, " << spec->model().backend()->graph_stats().replays << " replays\n";
    EXPECT_GT(st.num_accepted_tokens, 0) << "k=" << k;
    EXPECT_EQ(spec->allocator().num_free(), spec->allocator().num_blocks());
  }
}

TEST_P(SpeculativeGpuTest, VerifyAndMtpStepsReplayAsGraphsWithTheEagerOutputs) {
  const auto requests = Requests();
  auto eager = MakeEngine("cuda", 3, /*eager=*/true);
  auto graphs = MakeEngine("cuda", 3);
  ASSERT_TRUE(eager && graphs);
  auto a = eager->Generate(requests);
  auto b = graphs->Generate(requests);
  ASSERT_TRUE(a.ok() && b.ok());
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_EQ((*a)[i].tokens.size(), (*b)[i].tokens.size());
    for (size_t t = 0; t < (*a)[i].tokens.size(); ++t) {
      EXPECT_EQ((*a)[i].tokens[t].id, (*b)[i].tokens[t].id) << "request " << i << " token " << t;
      EXPECT_EQ((*a)[i].tokens[t].logprob, (*b)[i].tokens[t].logprob) << "request " << i << " token " << t;
    }
  }
  const StepGraphStats st = graphs->model().backend()->graph_stats();
  EXPECT_EQ(eager->model().backend()->graph_stats().replays, 0);
  // Decode-shaped MTP steps, verify steps of 2..4 tokens per sequence and
  // the MTP layer over them: several shapes, each captured once and replayed.
  EXPECT_GE(st.captures, 3) << "graphs " << st.graphs << ", eager steps " << st.eager_steps;
  EXPECT_GT(st.replays, st.captures);
  EXPECT_EQ(st.capture_failures, 0);
}

INSTANTIATE_TEST_SUITE_P(Variants, SpeculativeGpuTest,
                         ::testing::Values(Variant{"glm5_bf16", ModelArch::kGlmMoeDsa, false},
                                           Variant{"glm5_fp8", ModelArch::kGlmMoeDsa, true},
                                           Variant{"dsv32_bf16", ModelArch::kDeepseekV32, false},
                                           Variant{"dsv32_fp8", ModelArch::kDeepseekV32, true}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace spar
