// The MoE routing and permutation kernels against kernels/ref on fresh
// random inputs: routing (GLM-5 and DeepSeek group-limited configs, one
// token, 512 experts, exact ties), permutation invariants under expert
// parallelism, both in one launch (and from a CUDA graph), and the
// parameters they refuse.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/gemm/moe.h"
#include "kernels/cuda/gemm/w8a16_gemm.h"
#include "kernels/ref/moe_ref.h"
#include "tests/kernels/gemm/gemm_test_util.h"
#include "tests/kernels/gpu_test_util.h"

namespace spar {
namespace {

using testing::DeviceArray;
using testing::RandomLogits;

struct RouteResult {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

RouteResult RunRoute(const std::vector<float>& logits, const std::vector<float>& bias, int64_t tokens,
                     const ref::MoeRoutingParams& rp) {
  DeviceArray<float> dl, db;
  dl.Upload(logits);
  db.Upload(bias);
  DeviceArray<int32_t> ids(tokens * rp.top_k);
  DeviceArray<float> w(tokens * rp.top_k);
  ids.Poison();
  w.Poison();
  MoeRouteParams p;
  p.tokens = tokens;
  p.num_experts = rp.num_experts;
  p.top_k = rp.top_k;
  p.n_group = rp.n_group;
  p.topk_group = rp.topk_group;
  p.renormalize = rp.renormalize;
  p.routed_scaling = rp.routed_scaling;
  p.logits = dl.get();
  p.ld_logits = rp.num_experts;
  p.bias = db.get();
  p.expert_ids = ids.get();
  p.expert_weights = w.get();
  const absl::Status st = LaunchMoeRoute(p, nullptr);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return {ids.Download(), w.Download()};
}

void CheckRoute(const std::vector<float>& logits, const std::vector<float>& bias, int64_t tokens,
                const ref::MoeRoutingParams& rp) {
  SCOPED_TRACE(absl::StrCat("E=", rp.num_experts, " k=", rp.top_k, " groups=", rp.n_group, "/", rp.topk_group));
  const RouteResult got = RunRoute(logits, bias, tokens, rp);
  std::vector<int32_t> ids(tokens * rp.top_k);
  std::vector<float> w(tokens * rp.top_k);
  ref::MoeRoute(logits.data(), bias.data(), tokens, rp, ids.data(), w.data());
  EXPECT_EQ(got.ids, ids);
  for (size_t i = 0; i < w.size(); ++i) {
    EXPECT_NEAR(got.weights[i], w[i], 2e-6 * std::fabs(w[i]) + 1e-7) << "pair " << i;
  }
}

TEST(Sm80_MoeRoute, MatchesReference) {
  SPAR_REQUIRE_GPU();
  Rng rng(5);
  std::vector<float> bias256(256), bias64(64);
  for (auto& b : bias256) b = 0.1f * rng.Symmetric();
  for (auto& b : bias64) b = 0.1f * rng.Symmetric();
  // GLM-5: 256 experts, top-8, no group limit, x2.5.
  CheckRoute(RandomLogits(64, 256, 1), bias256, 64, {256, 8, 1, 1, true, 2.5f});
  // DeepSeek-V3.2: 8 groups, 4 kept.
  CheckRoute(RandomLogits(37, 256, 2), bias256, 37, {256, 8, 8, 4, true, 2.5f});
  CheckRoute(RandomLogits(50, 64, 3), bias64, 50, {64, 6, 8, 3, true, 1.0f});
  CheckRoute(RandomLogits(9, 64, 4), bias64, 9, {64, 3, 4, 1, false, 1.5f});
  CheckRoute(RandomLogits(300, 32, 6), std::vector<float>(32, 0.0f), 300, {32, 1, 1, 1, true, 1.0f});
  // Fewer experts than lanes (the tiny test models: 16 experts, top-4,
  // DeepSeek-style 4 groups of which 2 are kept).
  std::vector<float> bias16(bias64.begin(), bias64.begin() + 16);
  CheckRoute(RandomLogits(70, 16, 7), bias16, 70, {16, 4, 1, 1, true, 2.5f});
  CheckRoute(RandomLogits(70, 16, 8), bias16, 70, {16, 4, 4, 2, true, 2.5f});
  CheckRoute(RandomLogits(5, 7, 9), std::vector<float>(7, 0.0f), 5, {7, 3, 1, 1, false, 1.0f});
  // One decode token (one block); the largest expert count (two experts
  // per thread) with 16 groups and the largest top-k.
  CheckRoute(RandomLogits(1, 256, 10), bias256, 1, {256, 8, 1, 1, true, 2.5f});
  std::vector<float> bias512(512);
  for (auto& b : bias512) b = 0.1f * rng.Symmetric();
  CheckRoute(RandomLogits(3, 512, 11), bias512, 3, {512, 32, 16, 8, true, 2.5f});
  // The selection ranks segments of 32 experts: the most segments with the
  // most candidates each and no group limit, and three segments (five warps
  // idle) with groups that straddle them.
  CheckRoute(RandomLogits(2, 512, 12), bias512, 2, {512, 32, 1, 1, true, 2.5f});
  std::vector<float> bias96(bias512.begin(), bias512.begin() + 96);
  CheckRoute(RandomLogits(4, 96, 13), bias96, 4, {96, 8, 3, 2, true, 1.0f});
  CheckRoute(RandomLogits(4, 96, 14), bias96, 4, {96, 5, 6, 4, false, 1.0f});
}

TEST(Sm80_MoeRoute, TiesGoToTheLowerExpert) {
  SPAR_REQUIRE_GPU();
  // Logits drawn from three values and a zero bias: many exact ties, in the
  // group scores too.
  Rng rng(8);
  std::vector<float> logits(40 * 64);
  for (auto& v : logits) v = static_cast<float>(static_cast<int>(rng.Below(3)) - 1);
  const std::vector<float> bias(64, 0.0f);
  CheckRoute(logits, bias, 40, {64, 8, 1, 1, true, 2.5f});
  CheckRoute(logits, bias, 40, {64, 8, 8, 4, true, 2.5f});
  // Ties across all sixteen 32-expert segments, 32 selected.
  std::vector<float> logits512(6 * 512);
  for (auto& v : logits512) v = static_cast<float>(static_cast<int>(rng.Below(3)) - 1);
  CheckRoute(logits512, std::vector<float>(512, 0.0f), 6, {512, 32, 1, 1, true, 2.5f});
  CheckRoute(logits512, std::vector<float>(512, 0.0f), 6, {512, 20, 16, 3, true, 2.5f});
  // All equal: experts 0..k-1 with equal weights.
  const std::vector<float> flat(4 * 64, 0.5f);
  const RouteResult r = RunRoute(flat, bias, 4, {64, 8, 1, 1, true, 1.0f});
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(r.ids[i], i);
    EXPECT_NEAR(r.weights[i], 0.125f, 1e-7f);
  }
}

// 100 tokens: the pairs fit the block's registers (read once); 600: they
// do not (read again for the scatter).
class Sm80_MoePermute : public ::testing::TestWithParam<int64_t> {};

TEST_P(Sm80_MoePermute, GroupsPairsByLocalExpert) {
  SPAR_REQUIRE_GPU();
  const int64_t tokens = GetParam();
  const int top_k = 8, experts = 64, e0 = 16, e1 = 48;
  Rng rng(9 + tokens);
  std::vector<int32_t> ids(tokens * top_k);
  for (int64_t t = 0; t < tokens; ++t) {
    std::set<int> chosen;
    while (static_cast<int>(chosen.size()) < top_k) chosen.insert(static_cast<int>(rng.Below(experts)));
    int j = 0;
    for (int e : chosen) ids[t * top_k + j++] = e;
  }
  DeviceArray<int32_t> dids, offsets(e1 - e0 + 1), sorted(tokens * top_k), slot(tokens * top_k);
  dids.Upload(ids);
  offsets.Poison();
  sorted.Poison();
  slot.Poison();
  MoePermuteParams p;
  p.tokens = tokens;
  p.top_k = top_k;
  p.expert_ids = dids.get();
  p.expert_begin = e0;
  p.expert_end = e1;
  p.expert_offsets = offsets.get();
  p.sorted_token = sorted.get();
  p.slot = slot.get();
  ASSERT_TRUE(LaunchMoePermute(p, nullptr).ok());
  SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
  const auto off = offsets.Download(), srt = sorted.Download(), sl = slot.Download();
  std::vector<int> count(e1 - e0, 0);
  for (int32_t e : ids) {
    if (e >= e0 && e < e1) ++count[e - e0];
  }
  ASSERT_EQ(off[0], 0);
  for (int e = 0; e < e1 - e0; ++e) EXPECT_EQ(off[e + 1] - off[e], count[e]) << "expert " << e + e0;
  std::vector<int> used(tokens * top_k, 0);
  for (int64_t i = 0; i < tokens * top_k; ++i) {
    const int e = ids[i];
    if (e < e0 || e >= e1) {
      EXPECT_EQ(sl[i], -1);
      continue;
    }
    ASSERT_GE(sl[i], off[e - e0]);
    ASSERT_LT(sl[i], off[e - e0 + 1]);
    EXPECT_EQ(srt[sl[i]], i / top_k);
    ++used[sl[i]];
  }
  for (int r = 0; r < off[e1 - e0]; ++r) EXPECT_EQ(used[r], 1) << "permuted row " << r;
}

INSTANTIATE_TEST_SUITE_P(Tokens, Sm80_MoePermute, ::testing::Values(100, 600));

// Routing and permutation in one launch: the same ids, weights and grouping
// as the two launches, for one block of tokens and many, experts all local
// or a rank's range, and again from a CUDA graph (the arrival counter must
// be back at zero after every launch).
TEST(Sm80_MoeRoutePermute, EqualsRouteThenPermute) {
  SPAR_REQUIRE_GPU();
  struct Case {
    int64_t tokens;
    ref::MoeRoutingParams rp;
    int e0, e1;
  };
  Rng rng(11);
  std::vector<float> bias512(512);
  for (auto& b : bias512) b = 0.1f * rng.Symmetric();
  const Case cases[] = {
      {1, {256, 8, 1, 1, true, 2.5f}, 0, 256},   // GLM-5 decode, batch 1 (the one-token path)
      {1, {256, 8, 8, 4, true, 2.5f}, 64, 128},  // one token on a rank of EP 4, DeepSeek groups
      {8, {256, 8, 1, 1, true, 2.5f}, 0, 256},   // exactly one block of tokens
      {9, {256, 8, 8, 4, true, 2.5f}, 0, 256},   // DeepSeek-V3.2 groups, a second block
      {64, {256, 8, 1, 1, true, 2.5f}, 64, 128}, // a rank of EP 4
      {128, {256, 8, 1, 1, true, 2.5f}, 0, 256}, // the most pairs the permutation holds in registers
      {300, {256, 8, 8, 4, true, 2.5f}, 0, 256},
      {0, {256, 8, 1, 1, true, 2.5f}, 0, 256},   // empty: offsets still written
      {70, {16, 4, 4, 2, true, 2.5f}, 0, 16},    // the tiny models
      // More local experts than threads: the permutation's general instance
      // with few pairs (the decode instance owns one expert a thread).
      {8, {512, 8, 16, 8, true, 2.5f}, 0, 512},
      {8, {512, 8, 1, 1, true, 2.5f}, 128, 384},  // 256 local: the decode instance's edge
  };
  DeviceArray<int32_t> done(1);
  SPAR_ASSERT_CUDA(cudaMemset(done.get(), 0, 4));
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat("tokens=", c.tokens, " E=", c.rp.num_experts, " groups=", c.rp.n_group, " local=[",
                              c.e0, ",", c.e1, ")"));
    const std::vector<float> logits = RandomLogits(c.tokens, c.rp.num_experts, 20 + c.tokens);
    const std::vector<float> bias(bias512.begin(), bias512.begin() + c.rp.num_experts);
    const int64_t pairs = c.tokens * c.rp.top_k;
    const int n_local = c.e1 - c.e0;
    DeviceArray<float> dl, db;
    dl.Upload(logits.empty() ? std::vector<float>(1, 0.0f) : logits);
    db.Upload(bias);
    DeviceArray<int32_t> ids(std::max<int64_t>(pairs, 1)), offsets(n_local + 1), sorted(std::max<int64_t>(pairs, 1)),
        slot(std::max<int64_t>(pairs, 1));
    DeviceArray<float> w(std::max<int64_t>(pairs, 1));
    MoeRouteParams r;
    r.tokens = c.tokens;
    r.num_experts = c.rp.num_experts;
    r.top_k = c.rp.top_k;
    r.n_group = c.rp.n_group;
    r.topk_group = c.rp.topk_group;
    r.renormalize = c.rp.renormalize;
    r.routed_scaling = c.rp.routed_scaling;
    r.logits = dl.get();
    r.ld_logits = c.rp.num_experts;
    r.bias = db.get();
    r.expert_ids = ids.get();
    r.expert_weights = w.get();
    MoePermuteParams q;
    q.tokens = c.tokens;
    q.top_k = c.rp.top_k;
    q.expert_ids = ids.get();
    q.expert_begin = c.e0;
    q.expert_end = c.e1;
    q.expert_offsets = offsets.get();
    q.sorted_token = sorted.get();
    q.slot = slot.get();
    // Two work lists (8- and 64-row tiles), as the engine asks for them.
    const size_t list_bytes = MoeGroupedGemmWorkspaceBytes(std::max<int64_t>(pairs, 1), n_local);
    DeviceArray<int32_t> lists(2 * list_bytes / 4);
    q.num_work_lists = 2;
    q.work_block_tokens[0] = 8;
    q.work_block_tokens[1] = 64;
    q.work[0] = lists.get();
    q.work[1] = lists.get() + list_bytes / 4;
    // The two launches first: the expected offsets (a function of the ids).
    lists.Poison();
    ASSERT_TRUE(LaunchMoeRoute(r, nullptr).ok());
    ASSERT_TRUE(LaunchMoePermute(q, nullptr).ok());
    SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
    const auto want_ids = ids.Download(), want_off = offsets.Download();
    const auto want_w = w.Download();
    const auto want_lists = lists.Download();
    for (int run = 0; run < 2; ++run) {  // run 1: a CUDA graph replayed twice
      ids.Poison();
      w.Poison();
      offsets.Poison();
      sorted.Poison();
      slot.Poison();
      lists.Poison();
      if (run == 0) {
        ASSERT_TRUE(LaunchMoeRoutePermute(r, q, done.get(), nullptr).ok());
      } else {
        cudaStream_t st;
        SPAR_ASSERT_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
        cudaGraph_t graph;
        SPAR_ASSERT_CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        const absl::Status cap = LaunchMoeRoutePermute(r, q, done.get(), st);
        SPAR_ASSERT_CUDA(cudaStreamEndCapture(st, &graph));
        ASSERT_TRUE(cap.ok()) << cap;
        cudaGraphExec_t exec;
        SPAR_ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
        SPAR_ASSERT_CUDA(cudaGraphLaunch(exec, st));
        SPAR_ASSERT_CUDA(cudaGraphLaunch(exec, st));
        SPAR_ASSERT_CUDA(cudaStreamSynchronize(st));
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        cudaStreamDestroy(st);
      }
      SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
      const auto got_ids = ids.Download(), got_off = offsets.Download(), srt = sorted.Download(),
                 sl = slot.Download();
      const auto got_w = w.Download();
      ASSERT_EQ(done.Download()[0], 0) << "the arrival counter was not reset";
      ASSERT_EQ(got_off, want_off);
      const auto got_lists = lists.Download();
      for (int l = 0; l < 2; ++l) {  // the entry count, then (expert, first row, rows, 0) per entry
        const size_t base = l * list_bytes / 4;
        ASSERT_EQ(got_lists[base], want_lists[base]) << "work list " << l << " entries";
        for (int32_t i = 0; i < 4 * want_lists[base]; ++i) {
          ASSERT_EQ(got_lists[base + 4 + i], want_lists[base + 4 + i]) << "work list " << l << " word " << i;
        }
      }
      for (int64_t i = 0; i < pairs; ++i) {
        ASSERT_EQ(got_ids[i], want_ids[i]) << "pair " << i;
        ASSERT_EQ(got_w[i], want_w[i]) << "pair " << i;
        const int e = got_ids[i] - c.e0;
        if (e < 0 || e >= n_local) {
          ASSERT_EQ(sl[i], -1);
          continue;
        }
        ASSERT_GE(sl[i], got_off[e]);
        ASSERT_LT(sl[i], got_off[e + 1]);
        ASSERT_EQ(srt[sl[i]], i / c.rp.top_k);
      }
    }
  }
  MoeRouteParams r;
  MoePermuteParams q;
  r.tokens = q.tokens = 1;
  r.num_experts = 16;
  r.top_k = q.top_k = 4;
  q.expert_begin = 0;
  q.expert_end = 16;
  EXPECT_EQ(LaunchMoeRoutePermute(r, q, done.get(), nullptr).code(), absl::StatusCode::kInvalidArgument);
}

// A grouped GEMM asks the permutation for the list of its entry height: the
// same height shares one list, a new one takes the next slot of the storage,
// none past kMaxPermuteWorkLists, none for height 0. Host only: no GPU.
TEST(MoeParams, RequestPermuteWorkListSharesOneListPerHeight) {
  alignas(16) static uint8_t storage[kMaxPermuteWorkLists * 256];
  MoePermuteParams p;
  EXPECT_EQ(RequestPermuteWorkList(&p, 0, storage, 256), nullptr);
  EXPECT_EQ(p.num_work_lists, 0);
  void* eight = RequestPermuteWorkList(&p, 8, storage, 256);
  EXPECT_EQ(eight, storage);
  EXPECT_EQ(RequestPermuteWorkList(&p, 8, storage, 256), eight);
  EXPECT_EQ(p.num_work_lists, 1);
  void* sixty_four = RequestPermuteWorkList(&p, 64, storage, 256);
  EXPECT_EQ(sixty_four, storage + 256);
  ASSERT_EQ(p.num_work_lists, 2);
  EXPECT_EQ(p.work_block_tokens[0], 8);
  EXPECT_EQ(p.work_block_tokens[1], 64);
  EXPECT_EQ(RequestPermuteWorkList(&p, 16, storage, 256), nullptr);  // both lists hold other heights
  EXPECT_EQ(p.num_work_lists, 2);
  EXPECT_EQ(RequestPermuteWorkList(&p, 64, storage, 256), sixty_four);
}

// The work lists' and the split workspace's parameters are refused with a
// message naming them, before anything is launched (host pointers stand in
// for device buffers here: validation never reads them), so this runs
// without a GPU too.
TEST(MoeParams, RejectsBadWorkListsAndSplitWorkspace) {
  alignas(256) static int32_t host[4096];
  MoePermuteParams q;
  q.tokens = 2;
  q.top_k = 2;
  q.expert_ids = host;
  q.expert_begin = 0;
  q.expert_end = 8;
  q.expert_offsets = host;
  q.sorted_token = host;
  q.slot = host;
  q.num_work_lists = kMaxPermuteWorkLists + 1;
  absl::Status st = LaunchMoePermute(q, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("num_work_lists"), std::string::npos) << st;
  q.num_work_lists = 1;
  q.work[0] = host;
  for (int bt : {0, 1, kMinWorkListBlockTokens - 1}) {  // entries a list of its size has no room for
    q.work_block_tokens[0] = bt;
    st = LaunchMoePermute(q, nullptr);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("work_block_tokens"), std::string::npos) << st;
  }
  q.work_block_tokens[0] = kMinWorkListBlockTokens;
  q.work[0] = reinterpret_cast<uint8_t*>(host) + 4;  // not 16-byte aligned
  st = LaunchMoePermute(q, nullptr);
  EXPECT_NE(st.message().find("work"), std::string::npos) << st;
  q.work[0] = nullptr;
  EXPECT_EQ(LaunchMoePermute(q, nullptr).code(), absl::StatusCode::kInvalidArgument);
  MoeRouteParams r;
  r.tokens = 2;
  r.num_experts = 8;
  r.top_k = 2;
  r.logits = reinterpret_cast<const float*>(host);
  r.ld_logits = 8;
  r.bias = r.logits;
  r.expert_ids = host;
  r.expert_weights = reinterpret_cast<float*>(host);
  q.expert_ids = host;
  EXPECT_NE(LaunchMoeRoutePermute(r, q, host, nullptr).message().find("work"), std::string::npos);

  MoeGroupedGemmParams g;
  g.num_experts = 8;
  g.expert_offsets = host;
  g.max_rows = 4;
  g.k = 256;
  g.x = reinterpret_cast<const __nv_bfloat16*>(host);
  g.ldx = 256;
  g.weight = {GemmWeightType::kBf16, host, nullptr, 64};
  g.expert_weight_stride = 64 * 256;
  g.y = host;
  g.ldy = 64;
  g.workspace = host;
  g.workspace_bytes = sizeof(host);
  g.num_sms = 108;
  g.split_workspace = reinterpret_cast<uint8_t*>(host) + 16;  // 16- but not 256-byte aligned
  g.split_workspace_bytes = 1024;
  st = LaunchMoeGroupedGemm(g, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("split_workspace"), std::string::npos) << st;
  // The tail split's parameters (the tile kernel forced: four rows would take the streaming one).
  g.split_workspace = nullptr;
  g.force_stream_warps = -1;
  g.tail_rows = -2;
  st = LaunchMoeGroupedGemm(g, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("tail_rows"), std::string::npos) << st;
  g.tail_rows = -1;
  g.force_tail_config = gemm::kNumTileConfigs;
  st = LaunchMoeGroupedGemm(g, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("force_tail_config"), std::string::npos) << st;
}

}  // namespace
}  // namespace spar
