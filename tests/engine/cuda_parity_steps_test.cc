// The cuda backend's decode steps against themselves (tests of the
// CudaParityTest suite, instantiated in cuda_parity_test.cc): graph replays
// against eager steps, overlapped branches against serial ones, and the
// separate indexer query GEMM against the cpu. GPU test: SKIPPED without an
// sm80+ GPU.
#include <algorithm>
#include <cmath>
#include <memory>

#include "engine/cuda/cuda_backend.h"
#include "engine/engine.h"
#include "gtest/gtest.h"
#include "tests/engine/cuda_parity.h"
#include "tests/engine/selection_overlap.h"
#include "tests/engine/greedy_requests.h"
#include "tests/engine/test_util.h"

namespace spar::testing {
namespace {

// Decode steps replayed as CUDA graphs against the same steps run eagerly,
// on the same caches (a decode step rewrites only its own new cache row, so
// running it twice is harmless). The contexts grow across the indexer's
// top-k (64 here: all keys selected below it, scored and selected above)
// and across several power-of-two table widths, and the batch changes
// shape on the way, so captures of several keys are replayed for plans
// other than the one they were captured with. Steps whose contexts fit in
// the top-k run the very same kernels with the same arguments: bitwise
// equal. Above it the graph's indexer grids cover the whole bucket (the
// kernels stop at each row's length), which may reorder equal-score
// selections and so the attention sums: bf16 tolerance and the same argmax.
TEST_P(CudaParityTest, DecodeGraphsReplayLikeEagerSteps) {
  constexpr int kTopK = 64, kSteps = 150, kSeqBlocks = 4;
  auto cuda = MakeEngine(dir_, "cuda", kTopK);
  ASSERT_TRUE(cuda);
  Model& model = cuda->model();
  Backend* backend = model.backend();
  const ModelConfig& c = model.config();
  struct Seq {
    std::vector<int32_t> tokens;
    std::vector<int32_t> table;
  };
  std::vector<Seq> seqs(3);
  for (int i = 0; i < 3; ++i) {
    seqs[i].tokens.assign(prompts_[i].begin(), prompts_[i].begin() + std::min<size_t>(prompts_[i].size(), 5 + 7 * i));
    for (int b = 0; b < kSeqBlocks; ++b) seqs[i].table.push_back(i * kSeqBlocks + b);
  }
  auto host_rows = [&](const Tensor& t) {
    auto h = backend->ToHost(t);
    EXPECT_TRUE(h.ok()) << h.status();
    return h.ok() ? *h : std::vector<float>();
  };
  {  // prefill, eager
    StepPlan plan;
    for (int i = 0; i < 3; ++i) {
      plan.seqs.push_back({.seq_id = i, .start_pos = 0, .tokens = seqs[i].tokens, .block_table = seqs[i].table,
                           .num_logits = 0});
    }
    ASSERT_TRUE(plan.Finalize(c.vocab_size, c.max_position_embeddings, model.num_blocks()).ok());
    ASSERT_TRUE(model.Forward(plan, nullptr).ok());
  }
  const StepGraphStats before = backend->graph_stats();
  int bitwise = 0, dense_steps = 0, sparse_steps = 0;
  double worst_sparse = 0;
  for (int step = 0; step < kSteps; ++step) {
    // Batch shapes change: all three, then without the second, then all.
    std::vector<int> active = {0, 1, 2};
    if (step >= 40 && step < 70) active = {0, 2};
    StepPlan plan;
    int max_ctx = 0;
    for (int i : active) {
      const int pos = static_cast<int>(seqs[i].tokens.size()) - 1;
      // The newest token was never cached: decode it at its position.
      plan.seqs.push_back({.seq_id = i, .start_pos = pos, .tokens = {seqs[i].tokens.back()},
                           .block_table = std::vector<int32_t>(seqs[i].table.begin(),
                                                               seqs[i].table.begin() + pos / 64 + 1),
                           .num_logits = 1});
      max_ctx = std::max(max_ctx, pos + 1);
    }
    ASSERT_TRUE(plan.Finalize(c.vocab_size, c.max_position_embeddings, model.num_blocks()).ok());
    backend->set_step_replay(true);
    auto graph = model.Forward(plan, nullptr);
    ASSERT_TRUE(graph.ok()) << graph.status();
    const std::vector<float> g = host_rows(*graph);
    backend->set_step_replay(false);
    auto eager = model.Forward(plan, nullptr);
    ASSERT_TRUE(eager.ok()) << eager.status();
    const std::vector<float> e = host_rows(*eager);
    backend->set_step_replay(true);
    ASSERT_EQ(g.size(), e.size());
    bitwise += g == e;
    const int64_t vocab = c.vocab_size;
    for (size_t r = 0; r < active.size(); ++r) {
      const std::vector<float> gr(g.begin() + r * vocab, g.begin() + (r + 1) * vocab);
      const std::vector<float> er(e.begin() + r * vocab, e.begin() + (r + 1) * vocab);
      const int32_t next = static_cast<int32_t>(std::max_element(er.begin(), er.end()) - er.begin());
      if (max_ctx <= kTopK) {
        ASSERT_EQ(gr, er) << "step " << step << ", row " << r << ": all-keys step differs between graph and eager";
      } else {
        const double err = RelErr(er, gr);
        worst_sparse = std::max(worst_sparse, err);
        EXPECT_LE(err, 2e-2) << "step " << step << ", row " << r;
        EXPECT_EQ(std::max_element(gr.begin(), gr.end()) - gr.begin(), next) << "step " << step << ", row " << r;
      }
      seqs[active[r]].tokens.push_back(next);
    }
    (max_ctx <= kTopK ? dense_steps : sparse_steps) += 1;
  }
  const StepGraphStats after = backend->graph_stats();
  EXPECT_GT(dense_steps, 10);
  EXPECT_GT(sparse_steps, 10);
  EXPECT_EQ(after.capture_failures, before.capture_failures);
  // Keys: (3 or 2 sequences) x (table widths 1, 2, 4) x (all keys or scored).
  EXPECT_GE(after.captures - before.captures, 4);
  EXPECT_EQ(after.replays - before.replays, kSteps) << "every graph-enabled step replayed";
  std::cout << GetParam().name << ": " << kSteps << " decode steps, graphs " << after.captures - before.captures
            << " captured; bitwise equal to eager on " << bitwise << " steps (" << dense_steps
            << " all-keys steps must be); worst scored-step rel err " << worst_sparse << "\n";
}

// The W8A16 GEMMs' weights stored in 16-row x 64-byte tiles, ordered along
// K or across rows (BackendOptions::gemm_weight_tiling), instead of
// row-major: the same arithmetic reading other addresses, so every logit of
// a prefill (the tile kernel), of a prompt of <= 8 tokens (the streaming
// kernel) and every token and log-probability of greedy decoding (graph
// replays) is bit for bit the row-major engine's, in every weight format of
// the variants (4-bit matrices keep their own layout beside tiled FP8 / bf16
// ones).
TEST_P(CudaParityTest, TiledGemmWeightsChangeNoBit) {
  const BackendOptions defaults;
  auto row_major = MakeEngine(dir_, "cuda", kDense, {}, 64, defaults.urgent_branch_priority, ModelOptions{}.indexer_query,
                              GemmWeightTiling::kRowMajor);
  ASSERT_TRUE(row_major);
  const std::vector<GenerationRequest> reqs = GreedyRequests(prompts_, 12);
  auto ga = row_major->Generate(reqs);
  ASSERT_TRUE(ga.ok()) << ga.status();
  for (const GemmWeightTiling tiling : {GemmWeightTiling::kAlongK, GemmWeightTiling::kAcrossRows}) {
    SCOPED_TRACE(GemmWeightTilingName(tiling));
    auto tiled =
        MakeEngine(dir_, "cuda", kDense, {}, 64, defaults.urgent_branch_priority, ModelOptions{}.indexer_query, tiling);
    ASSERT_TRUE(tiled);
    int64_t compared = 0;
    for (const auto& full : prompts_) {
      for (const size_t len : {full.size(), std::min<size_t>(full.size(), 5)}) {
        const std::vector<int32_t> ids(full.begin(), full.begin() + len);
        auto a = row_major->PromptLogits({ids}, 2);
        auto b = tiled->PromptLogits({ids}, 2);
        ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
        ASSERT_EQ((*a)[0].size(), (*b)[0].size());
        for (size_t r = 0; r < (*a)[0].size(); ++r) {
          ASSERT_EQ((*a)[0][r].size(), (*b)[0][r].size());
          int64_t differ = 0;
          for (size_t i = 0; i < (*a)[0][r].size(); ++i) differ += (*a)[0][r][i] != (*b)[0][r][i];
          EXPECT_EQ(differ, 0) << len << "-token prompt, logit row " << r;
          ++compared;
        }
      }
    }
    auto gb = tiled->Generate(reqs);
    ASSERT_TRUE(gb.ok()) << gb.status();
    for (size_t i = 0; i < reqs.size(); ++i) {
      ASSERT_EQ((*ga)[i].tokens.size(), (*gb)[i].tokens.size());
      for (size_t t = 0; t < (*ga)[i].tokens.size(); ++t) {
        EXPECT_EQ((*ga)[i].tokens[t].id, (*gb)[i].tokens[t].id) << "prompt " << i << ", token " << t;
        EXPECT_EQ((*ga)[i].tokens[t].logprob, (*gb)[i].tokens[t].logprob) << "prompt " << i << ", token " << t;
      }
    }
    std::cout << GetParam().name << ": GEMM weights tiled " << GemmWeightTilingName(tiling) << ", " << compared
              << " logit rows and " << reqs.size() << " greedy continuations bit for bit the row-major engine's\n";
  }
}

// The layer's independent branches (the indexer's selection beside the
// query projections, the shared expert beside the routed ones) on two
// streams against the same ops on one (Backend::set_branch_overlap): the
// same kernels on the same inputs, so every logit is bitwise equal, for a
// prefill step and for decode steps replayed as graphs (the fork and join
// captured as graph edges) on scored contexts. A missing join or a shared
// split-K workspace shows up as a differing (or NaN) logit. Both with the
// side stream at the default priority and at the highest (the urgent branch
// option, which also moves the routed experts onto it).
TEST_P(CudaParityTest, OverlappedBranchesEqualSerialSteps) {
  for (bool urgent : {false, true}) {
    SCOPED_TRACE(urgent ? "urgent side branch" : "default priorities");
    ExpectOverlappedBranchesEqualSerial(urgent);
    if (HasFatalFailure()) return;
  }
}

// The indexer's query from a GEMM of its own, before the fork or on the
// selection branch (ModelOptions::indexer_query, the A/B of engine_bench
// --indexer-query; every other test here runs the default, q_b's GEMM
// writing both queries, q then reaching the RoPE and the absorption as the
// first columns of wider rows): dense logits as close to the cpu as the
// default's bound above, the selections of sparse prompts agreeing with the
// cpu's, and the overlapped branches equal to serial steps, graphs included.
TEST_P(CudaParityTest, SeparateIndexerQueryGemmKeepsParityWithCpu) {
  for (IndexerQueryGemm placement : {IndexerQueryGemm::kOnBranch, IndexerQueryGemm::kBeforeFork}) {
    SCOPED_TRACE(IndexerQueryGemmName(placement));
    ExpectSeparateIndexerQueryKeepsParity(placement);
    if (HasFatalFailure()) return;
  }
}

}  // namespace

void CudaParityTest::ExpectSeparateIndexerQueryKeepsParity(IndexerQueryGemm placement) {
  const std::string name(IndexerQueryGemmName(placement));
  {
    auto cpu = MakeEngine(dir_, "cpu", kDense);
    auto separate = MakeEngine(dir_, "cuda", kDense, {}, 64, BackendOptions{}.urgent_branch_priority, placement);
    ASSERT_TRUE(cpu && separate);
    std::vector<double> errs;
    for (const auto& ids : prompts_) {
      auto a = cpu->PromptLogits({ids}, 4);
      auto b = separate->PromptLogits({ids}, 4);
      ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
      for (size_t r = 0; r < (*a)[0].size(); ++r) errs.push_back(RelErr((*a)[0][r], (*b)[0][r]));
    }
    std::sort(errs.begin(), errs.end());
    const size_t within = std::upper_bound(errs.begin(), errs.end(), 3e-2) - errs.begin();
    std::cout << GetParam().name << ": indexer query " << name << ", dense, relative logit error cuda vs cpu: median "
              << errs[errs.size() / 2] << ", worst " << errs.back() << "\n";
    EXPECT_LE(errs[errs.size() / 2], 3e-2);
    EXPECT_GE(within, errs.size() * 3 / 4);
  }
  {
    const CacheDtypes dtypes = {LatentFormat::kBF16, IndexerFormat::kFp8};
    auto cpu = MakeEngine(dir_, "cpu", 0, dtypes);
    auto separate = MakeEngine(dir_, "cuda", 0, dtypes, 64, BackendOptions{}.urgent_branch_priority, placement);
    ASSERT_TRUE(cpu && separate);
    for (size_t p = 3; p < prompts_.size(); ++p) {  // 80, 200 and 350 tokens
      ForwardTrace ta, tb;
      auto a = cpu->PromptLogits({prompts_[p]}, 1, &ta);
      auto b = separate->PromptLogits({prompts_[p]}, 1, &tb);
      ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
      ASSERT_FALSE(ta.topk_slots.empty());
      const int layer = ta.topk_slots.begin()->first;
      const double overlap = SelectionOverlap(ta, tb, layer, prompts_[p].size());
      std::cout << GetParam().name << ": indexer query " << name << ", " << prompts_[p].size() << " tokens, layer " << layer
                << " top-k overlap cuda vs cpu " << overlap << "\n";
      EXPECT_GE(overlap, 0.95) << "prompt of " << prompts_[p].size();
    }
  }
  ExpectOverlappedBranchesEqualSerial(BackendOptions{}.urgent_branch_priority, placement);
}

void CudaParityTest::ExpectOverlappedBranchesEqualSerial(bool urgent, IndexerQueryGemm indexer_query) {
  constexpr int kTopK = 32, kSteps = 24, kPrompt = 48;
  auto cuda = MakeEngine(dir_, "cuda", kTopK, {}, 64, urgent, indexer_query);
  ASSERT_TRUE(cuda);
  Model& model = cuda->model();
  Backend* backend = model.backend();
  const ModelConfig& c = model.config();
  std::vector<std::vector<int32_t>> tokens(2), tables(2);
  for (int i = 0; i < 2; ++i) {
    const std::vector<int32_t>& p = prompts_.at(3 + i);  // 80 and 200 tokens: contexts above the top-k
    tokens[i].assign(p.begin(), p.begin() + std::min<size_t>(p.size(), kPrompt - 9 * i));
    for (int b = 0; b < 2; ++b) tables[i].push_back(i * 2 + b);
  }
  auto both_ways = [&](const StepPlan& plan, const char* what, int step) -> std::vector<float> {
    std::vector<float> out[2];
    for (int overlap : {1, 0}) {
      backend->set_branch_overlap(overlap == 1);
      auto logits = model.Forward(plan, nullptr);
      EXPECT_TRUE(logits.ok()) << logits.status();
      if (!logits.ok()) return {};
      auto host = backend->ToHost(*logits);
      EXPECT_TRUE(host.ok()) << host.status();
      if (host.ok()) out[overlap] = *host;
    }
    backend->set_branch_overlap(true);
    EXPECT_FALSE(out[1].empty());
    EXPECT_EQ(out[1], out[0]) << what << " " << step << ": overlapped branches differ from serial ones";
    for (float v : out[1]) EXPECT_TRUE(std::isfinite(v)) << what << " " << step;
    return out[1];
  };
  StepPlan prefill;
  for (int i = 0; i < 2; ++i) {
    prefill.seqs.push_back({.seq_id = i, .start_pos = 0, .tokens = tokens[i], .block_table = tables[i], .num_logits = 1});
  }
  ASSERT_TRUE(prefill.Finalize(c.vocab_size, c.max_position_embeddings, model.num_blocks()).ok());
  std::vector<float> logits = both_ways(prefill, "prefill", 0);
  ASSERT_EQ(logits.size(), 2u * c.vocab_size);
  const StepGraphStats before = backend->graph_stats();
  for (int step = 0; step < kSteps; ++step) {
    StepPlan plan;
    for (int i = 0; i < 2; ++i) {
      const auto row = logits.begin() + i * c.vocab_size;
      tokens[i].push_back(static_cast<int32_t>(std::max_element(row, row + c.vocab_size) - row));
      const int pos = static_cast<int>(tokens[i].size()) - 1;
      plan.seqs.push_back({.seq_id = i, .start_pos = pos, .tokens = {tokens[i].back()},
                           .block_table = std::vector<int32_t>(tables[i].begin(), tables[i].begin() + pos / 64 + 1),
                           .num_logits = 1});
    }
    ASSERT_TRUE(plan.Finalize(c.vocab_size, c.max_position_embeddings, model.num_blocks()).ok());
    logits = both_ways(plan, "decode step", step);
    ASSERT_EQ(logits.size(), 2u * c.vocab_size);
  }
  const StepGraphStats after = backend->graph_stats();
  EXPECT_EQ(after.capture_failures, before.capture_failures);
  EXPECT_EQ(after.replays - before.replays, 2 * kSteps) << "every decode step replayed, both ways";
  std::cout << GetParam().name << (urgent ? " (urgent side branch)" : "") << ": prefill and " << kSteps
            << " decode steps (contexts " << tokens[1].size() - kSteps << ".." << tokens[0].size() << ", top-k " << kTopK
            << "), overlapped branches bitwise equal to serial\n";
}

}  // namespace spar::testing
