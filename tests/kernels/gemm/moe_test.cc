// The whole MoE layer against kernels/ref on fresh random inputs (route ->
// permute -> grouped gate/up with SiLU·mul -> grouped down -> shared expert
// through the dense GEMM -> combine with residual) for the edge
// cases: a rank holding a subset of experts, experts with zero tokens, a
// single expert hit, all tokens on one expert, all tokens routed to other
// ranks, K = 128 (down projection of the single-expert case), every grouped
// tile and split, the permutation's work lists. Routing and permutation
// alone: moe_route_test.cc.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
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
using testing::DeviceWeight;
using testing::HostWeight;
using testing::MakeActivations;
using testing::MakeWeight;
using testing::RandomLogits;

constexpr GemmWeightType kFp8 = GemmWeightType::kFp8Block128;

// ---------------------------------------------------------------------------
// Whole MoE layer.

struct MoeCase {
  int64_t tokens = 40;
  int experts = 32;     // routed experts in the model
  int e0 = 8, e1 = 24;  // local to this rank
  int top_k = 4;
  int64_t hidden = 256;
  int64_t inter = 256;  // the down projection's K
  // Routing bias: +20 on these experts' logits for every token.
  std::vector<int> favoured;
  bool shared = true;
  bool residual = true;
  int force_config = -1;  // grouped GEMMs
  int force_splits = 1;   // with force_config: split-K factor of both grouped GEMMs
  int force_stream_warps = 0;  // MoeGroupedGemmParams::force_stream_warps
  // The permutation writes the grouped GEMMs' work lists (a second
  // LaunchMoePermute of the same ids, once the GEMMs' plans are known).
  bool permute_work_lists = false;
  GemmWeightLayout layout = GemmWeightLayout::kRowMajor;  // the experts' (w8a16_tiles.h)
  int tail_rows = -1;    // MoeGroupedGemmParams::tail_rows of both grouped GEMMs
  int tail_config = -1;  // their force_tail_config
  // Both grouped GEMMs again without the tail split, into poisoned buffers:
  // they must equal the launches above bit for bit.
  bool tail_equals_untailed = false;
  uint64_t seed = 1;
};

// Local experts' matrices stored as one strided allocation each, rows
// zero-padded to whole 64-byte stages where k is not (as the engine packs them).
struct ExpertBank {
  std::vector<HostWeight> host;  // per local expert
  DeviceArray<uint8_t> bytes;
  DeviceArray<float> scale;
  int64_t weight_stride = 0, scale_stride = 0, ld = 0;
  GemmWeightLayout layout = GemmWeightLayout::kRowMajor;

  // Tiled: each expert in tiles of its rows padded to 16 (the stride too).
  void Build(int n_local, int64_t n, int64_t k, uint64_t seed, GemmWeightLayout weight_layout) {
    host.clear();
    layout = weight_layout;
    ld = PaddedGemmRowElements(k, kFp8);
    const bool tiled = IsTiled(layout);
    const int64_t stored_rows = tiled ? gemm::GemmTiledRows(n) : n;
    std::vector<uint8_t> b(static_cast<size_t>(n_local * stored_rows * ld), 0);
    std::vector<float> s;
    for (int e = 0; e < n_local; ++e) {
      host.push_back(MakeWeight(kFp8, n, k, seed + e));
      std::vector<uint8_t> rows(static_cast<size_t>(n * ld), 0);
      for (int64_t r = 0; r < n; ++r) {
        std::memcpy(rows.data() + r * ld, host.back().bytes.data() + r * k, static_cast<size_t>(k));
      }
      if (tiled) rows = gemm::TileGemmRows(rows.data(), n, ld, TileOrderOf(layout));
      std::memcpy(b.data() + e * stored_rows * ld, rows.data(), rows.size());
      s.insert(s.end(), host.back().scale.begin(), host.back().scale.end());
    }
    weight_stride = stored_rows * ld;
    scale_stride = static_cast<int64_t>(host[0].scale.size());
    bytes.Upload(b);
    scale.Upload(s);
  }
  GemmWeight View() const {
    GemmWeight g;
    g.type = kFp8;
    g.data = bytes.get();
    g.scale = scale.get();
    g.n = host[0].n;
    g.ld = ld;
    g.layout = layout;
    return g;
  }
};

float Silu(float g) { return g / (1.0f + std::exp(-g)); }

void RunMoeLayer(const MoeCase& c) {
  SCOPED_TRACE(absl::StrCat("tokens=", c.tokens, " local=[", c.e0, ",", c.e1, ") k=", c.top_k,
                            " cfg=", c.force_config, " splits=", c.force_splits, " favoured=", c.favoured.size(),
                            IsTiled(c.layout) ? " tiled" : "", c.layout == GemmWeightLayout::kTilesAcrossRows ? " across rows" : ""));
  const int64_t T = c.tokens, H = c.hidden, I = c.inter;
  const int n_local = c.e1 - c.e0;
  const int64_t rows = T * c.top_k;

  // Inputs.
  const std::vector<float> x = MakeActivations(T, H, c.seed * 3 + 1);
  std::vector<float> logits = RandomLogits(T, c.experts, c.seed * 3 + 2);
  for (int64_t t = 0; t < T; ++t) {
    for (int e : c.favoured) logits[t * c.experts + e] += 20.0f;
  }
  Rng rng(c.seed * 3 + 3);
  std::vector<float> bias(c.experts);
  for (auto& b : bias) b = 0.05f * rng.Symmetric();
  const ref::MoeRoutingParams rp{c.experts, c.top_k, 1, 1, true, 2.5f};

  ExpertBank gate, up, down;
  gate.Build(n_local, I, H, c.seed * 1000 + 10, c.layout);
  up.Build(n_local, I, H, c.seed * 1000 + 400, c.layout);
  down.Build(n_local, H, I, c.seed * 1000 + 800, c.layout);
  const HostWeight sg = MakeWeight(kFp8, I, H, c.seed + 91), su = MakeWeight(kFp8, I, H, c.seed + 92),
                   sd = MakeWeight(kFp8, H, I, c.seed + 93);
  DeviceWeight dsg, dsu, dsd;
  dsg.Upload(sg);
  dsu.Upload(su);
  dsd.Upload(sd);
  const std::vector<float> resid = MakeActivations(T, H, c.seed * 3 + 4);

  // Device buffers (outputs poisoned).
  DeviceArray<uint16_t> dx, dres, hperm(rows * I), yperm(rows * H), hs(T * I), shared_out(T * H), out(T * H);
  dx.Upload(testing::ToBf16(x));
  dres.Upload(testing::ToBf16(resid));
  DeviceArray<float> dlogits, dbias, weights(rows);
  dlogits.Upload(logits);
  dbias.Upload(bias);
  DeviceArray<int32_t> ids(rows), offsets(n_local + 1), sorted(rows), slot(rows);
  for (auto* a : {&hperm, &yperm, &hs, &shared_out, &out}) a->Poison();
  ids.Poison();
  weights.Poison();
  offsets.Poison();
  sorted.Poison();
  slot.Poison();
  const size_t ws_bytes = MoeGroupedGemmWorkspaceBytes(rows, n_local);
  DeviceArray<uint8_t> ws(std::max<size_t>(ws_bytes, size_t{1} << 20));
  SPAR_ASSERT_CUDA(cudaMemset(ws.get(), 0, ws.bytes()));
  // Split-K partials and counters (zero between launches), as the engine
  // passes its dense GEMM workspace.
  DeviceArray<uint8_t> split_ws(size_t{16} << 20);
  SPAR_ASSERT_CUDA(cudaMemset(split_ws.get(), 0, split_ws.bytes()));

  // 1-2. Route.
  MoeRouteParams route;
  route.tokens = T;
  route.num_experts = c.experts;
  route.top_k = c.top_k;
  route.routed_scaling = 2.5f;
  route.logits = dlogits.get();
  route.ld_logits = c.experts;
  route.bias = dbias.get();
  route.expert_ids = ids.get();
  route.expert_weights = weights.get();
  ASSERT_TRUE(LaunchMoeRoute(route, nullptr).ok());
  // 3. Permute.
  MoePermuteParams perm;
  perm.tokens = T;
  perm.top_k = c.top_k;
  perm.expert_ids = ids.get();
  perm.expert_begin = c.e0;
  perm.expert_end = c.e1;
  perm.expert_offsets = offsets.get();
  perm.sorted_token = sorted.get();
  perm.slot = slot.get();
  ASSERT_TRUE(LaunchMoePermute(perm, nullptr).ok());
  // 4. gate/up with SiLU·mul, X gathered through sorted_token.
  MoeGroupedGemmParams gu;
  gu.num_experts = n_local;
  gu.expert_offsets = offsets.get();
  gu.max_rows = rows;
  gu.expected_rows_per_expert = std::max<int64_t>(1, rows / c.experts);
  gu.k = H;
  gu.x = reinterpret_cast<const __nv_bfloat16*>(dx.get());
  gu.ldx = H;
  gu.x_row_index = sorted.get();
  gu.weight = gate.View();
  gu.up = up.View();
  gu.expert_weight_stride = gate.weight_stride;
  gu.expert_scale_stride = gate.scale_stride;
  gu.epilogue = GemmEpilogue::kSiluMul;
  gu.y = hperm.get();
  gu.ldy = I;
  gu.workspace = ws.get();
  gu.workspace_bytes = ws.bytes();
  gu.split_workspace = split_ws.get();
  gu.split_workspace_bytes = split_ws.bytes();
  gu.force_config = c.force_config;
  gu.force_splits = c.force_splits;
  gu.force_stream_warps = c.force_stream_warps;
  gu.tail_rows = c.tail_rows;
  gu.force_tail_config = c.tail_config;
  if (c.force_config >= 0) {
    ASSERT_EQ(MoeGroupedGemmPlan(gu).splits, c.force_splits) << "the case asks for a split the shape cannot take";
  }
  DeviceArray<uint8_t> lists(2 * ws_bytes);
  int down_bt = 0;
  if (c.permute_work_lists) {
    MoeGroupedGemmParams probe = gu;  // the down GEMM's plan, as built below
    probe.k = I;
    probe.weight = down.View();
    probe.up = GemmWeight{};
    probe.epilogue = GemmEpilogue::kNone;
    down_bt = MoeGroupedGemmBlockTokens(probe);
    const int gu_bt = MoeGroupedGemmBlockTokens(gu);
    lists.Poison();
    MoePermuteParams with_lists = perm;
    with_lists.num_work_lists = gu_bt == down_bt ? 1 : 2;
    with_lists.work_block_tokens[0] = gu_bt;
    with_lists.work_block_tokens[1] = down_bt;
    with_lists.work[0] = lists.get();
    with_lists.work[1] = lists.get() + ws_bytes;
    sorted.Poison();
    slot.Poison();
    ASSERT_TRUE(LaunchMoePermute(with_lists, nullptr).ok());
    gu.work = lists.get();
    gu.work_block_tokens = gu_bt;
  }
  absl::Status st = LaunchMoeGroupedGemm(gu, nullptr);
  ASSERT_TRUE(st.ok()) << st;
  if (c.force_splits > 1) {
    // Again into a poisoned output: the first launch must have left every
    // split counter at zero for the next one.
    SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<uint16_t> first = hperm.Download();
    hperm.Poison();
    st = LaunchMoeGroupedGemm(gu, nullptr);
    ASSERT_TRUE(st.ok()) << st;
    SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
    EXPECT_EQ(hperm.Download(), first) << "a second split-K launch differs: counters not reset";
  }
  // 5. down (K = inter).
  MoeGroupedGemmParams dn = gu;
  dn.k = I;
  dn.x = reinterpret_cast<const __nv_bfloat16*>(hperm.get());
  dn.ldx = I;
  dn.x_row_index = nullptr;
  dn.weight = down.View();
  dn.up = GemmWeight{};
  dn.expert_weight_stride = down.weight_stride;
  dn.expert_scale_stride = down.scale_stride;
  dn.epilogue = GemmEpilogue::kNone;
  dn.y = yperm.get();
  dn.ldy = H;
  if (c.permute_work_lists) {
    dn.work = MoeGroupedGemmBlockTokens(gu) == down_bt ? lists.get() : lists.get() + ws_bytes;
    dn.work_block_tokens = down_bt;
  }
  st = LaunchMoeGroupedGemm(dn, nullptr);
  ASSERT_TRUE(st.ok()) << st;
  if (c.tail_equals_untailed) {
    ASSERT_GT(MoeGroupedGemmTailPlan(gu).below, 0) << "the case asks for a tail split the launch does not make";
    DeviceArray<uint16_t> h0(rows * I), y0(rows * H);
    h0.Poison();
    y0.Poison();
    MoeGroupedGemmParams gu0 = gu, dn0 = dn;
    gu0.tail_rows = dn0.tail_rows = 0;
    gu0.work = dn0.work = nullptr;
    gu0.y = h0.get();
    dn0.x = reinterpret_cast<const __nv_bfloat16*>(h0.get());
    dn0.y = y0.get();
    ASSERT_TRUE(LaunchMoeGroupedGemm(gu0, nullptr).ok());
    ASSERT_TRUE(LaunchMoeGroupedGemm(dn0, nullptr).ok());
    SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<int32_t> off = offsets.Download();
    const size_t local = static_cast<size_t>(off[n_local]);
    const std::vector<uint16_t> h_tail = hperm.Download(), h_plain = h0.Download();
    const std::vector<uint16_t> y_tail = yperm.Download(), y_plain = y0.Download();
    EXPECT_TRUE(std::equal(h_tail.begin(), h_tail.begin() + local * I, h_plain.begin())) << "gate/up differs with the tail split";
    EXPECT_TRUE(std::equal(y_tail.begin(), y_tail.begin() + local * H, y_plain.begin())) << "down differs with the tail split";
  }
  // 6. Shared expert through the dense GEMM.
  if (c.shared) {
    W8A16GemmParams a;
    a.m = T;
    a.k = H;
    a.x = reinterpret_cast<const __nv_bfloat16*>(dx.get());
    a.ldx = H;
    a.segments[0] = dsg.View(sg);
    a.epilogue = GemmEpilogue::kSiluMul;
    a.up = dsu.View(su);
    a.y = hs.get();
    a.ldy = I;
    ASSERT_TRUE(LaunchW8A16Gemm(a, nullptr).ok());
    W8A16GemmParams b;
    b.m = T;
    b.k = I;
    b.x = reinterpret_cast<const __nv_bfloat16*>(hs.get());
    b.ldx = I;
    b.segments[0] = dsd.View(sd);
    b.y = shared_out.get();
    b.ldy = H;
    ASSERT_TRUE(LaunchW8A16Gemm(b, nullptr).ok());
  }
  // 7. Combine.
  MoeCombineParams cb;
  cb.tokens = T;
  cb.top_k = c.top_k;
  cb.hidden = H;
  cb.expert_out = reinterpret_cast<const __nv_bfloat16*>(yperm.get());
  cb.ld_expert = H;
  cb.slot = slot.get();
  cb.weights = weights.get();
  if (c.shared) {
    cb.shared = reinterpret_cast<const __nv_bfloat16*>(shared_out.get());
    cb.ld_shared = H;
  }
  if (c.residual) {
    cb.residual = reinterpret_cast<const __nv_bfloat16*>(dres.get());
    cb.ld_residual = H;
  }
  cb.out = reinterpret_cast<__nv_bfloat16*>(out.get());
  cb.ld_out = H;
  ASSERT_TRUE(LaunchMoeCombine(cb, nullptr).ok());
  // The fp32 output (a tensor-parallel rank's partial sum) is the same
  // accumulation left unrounded: rounding it must give the bf16 output.
  DeviceArray<float> out32(T * H);
  out32.Poison();
  MoeCombineParams cb32 = cb;
  cb32.out = nullptr;
  cb32.out_f32 = out32.get();
  ASSERT_TRUE(LaunchMoeCombine(cb32, nullptr).ok());
  cb32.out = cb.out;  // both outputs set: rejected
  EXPECT_FALSE(LaunchMoeCombine(cb32, nullptr).ok());
  SPAR_ASSERT_CUDA(cudaGetLastError());
  SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
  {
    const std::vector<float> f32 = out32.Download();
    const std::vector<float> b16 = testing::FromBf16(out.Download());
    int64_t mismatched = 0;
    for (size_t i = 0; i < f32.size(); ++i) mismatched += RoundToBf16(f32[i]) != b16[i];
    EXPECT_EQ(mismatched, 0) << "fp32 combine output does not round to the bf16 one";
  }

  // Reference: routing from kernels/ref must agree exactly; the layer math
  // uses the GPU's weights (tested separately) and models the bf16 storage
  // of h, the expert outputs and the shared output.
  const std::vector<int32_t> gids = ids.Download();
  const std::vector<float> gw = weights.Download();
  std::vector<int32_t> rids(rows);
  std::vector<float> rw(rows);
  ref::MoeRoute(logits.data(), bias.data(), T, rp, rids.data(), rw.data());
  ASSERT_EQ(gids, rids);
  const std::vector<int32_t> off = offsets.Download();
  int local_pairs = 0, empty_experts = 0;
  for (int e = 0; e < n_local; ++e) {
    local_pairs += off[e + 1] - off[e];
    empty_experts += off[e + 1] == off[e];
  }
  std::vector<float> shared_ref(T * H, 0.0f);
  if (c.shared) {
    const std::vector<float> g = testing::RefGemm(x, T, H, sg.deq, I), u = testing::RefGemm(x, T, H, su.deq, I);
    std::vector<float> h(T * I);
    for (int64_t i = 0; i < T * I; ++i) h[i] = RoundToBf16(Silu(g[i]) * u[i]);
    shared_ref = testing::RefGemm(h, T, I, sd.deq, H);
    for (auto& v : shared_ref) v = RoundToBf16(v);
  }
  std::vector<float> ref_out(T * H);
  std::vector<float> xt(H), hrow(I);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> acc(H, 0.0f);
    for (int j = 0; j < c.top_k; ++j) {
      const int e = gids[t * c.top_k + j];
      if (e < c.e0 || e >= c.e1) continue;
      const int le = e - c.e0;
      std::copy(x.begin() + t * H, x.begin() + (t + 1) * H, xt.begin());
      const std::vector<float> g = testing::RefGemm(xt, 1, H, gate.host[le].deq, I);
      const std::vector<float> u = testing::RefGemm(xt, 1, H, up.host[le].deq, I);
      for (int64_t i = 0; i < I; ++i) hrow[i] = RoundToBf16(Silu(g[i]) * u[i]);
      const std::vector<float> y = testing::RefGemm(hrow, 1, I, down.host[le].deq, H);
      for (int64_t d = 0; d < H; ++d) acc[d] += gw[t * c.top_k + j] * RoundToBf16(y[d]);
    }
    for (int64_t d = 0; d < H; ++d) {
      float v = acc[d];
      if (c.shared) v += shared_ref[t * H + d];
      if (c.residual) v += resid[t * H + d];
      ref_out[t * H + d] = v;
    }
  }
  const std::vector<float> got = testing::FromBf16(out.Download());
  ASSERT_GT(testing::MaxAbs(ref_out), 0.0);
  const double rel = testing::RelativeL2(got, ref_out);
  EXPECT_LT(rel, 6e-3) << "local pairs " << local_pairs << ", empty local experts " << empty_experts;
  const double max_ref = testing::MaxAbs(ref_out);
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    bad += !(std::fabs(got[i] - ref_out[i]) <= std::fabs(ref_out[i]) / 64.0 + 5e-3 * max_ref);
  }
  EXPECT_EQ(bad, 0) << "rel L2 " << rel;
}

TEST(Sm80_MoeLayer, ExpertParallelSubset) {
  SPAR_REQUIRE_GPU();
  for (int64_t tokens : {1, 40, 300}) {
    MoeCase c;
    c.tokens = tokens;
    c.seed = 10 + tokens;
    RunMoeLayer(c);  // tokens = 1: most local experts have zero tokens
  }
}

// Hidden sizes and expert widths that are no whole number of the GEMM's
// 64-byte stages (the experts' rows zero-padded, X columns past k never
// read): both grouped GEMMs' K and N tails, every tile whose stage divides
// the padded rows, and the heuristic's own plan, at 1 and 40 tokens.
TEST(Sm80_MoeLayer, KTails) {
  SPAR_REQUIRE_GPU();
  for (const auto& [hidden, inter] : {std::pair<int64_t, int64_t>{200, 96}, {256, 96}, {136, 200}}) {
    // e4m3: a padded row's elements are its bytes.
    const int64_t row_bytes[2] = {PaddedGemmRowElements(hidden, kFp8), PaddedGemmRowElements(inter, kFp8)};
    for (int cfg = -1; cfg < gemm::kNumTileConfigs; ++cfg) {
      if (cfg >= 0) {
        const int stage = gemm::GetTileConfig(static_cast<gemm::TileConfigId>(cfg)).row_bytes_per_stage();
        if (row_bytes[0] % stage != 0 || row_bytes[1] % stage != 0) continue;
      }
      for (int64_t tokens : {1, 40}) {
        MoeCase c;
        c.tokens = tokens;
        c.hidden = hidden;
        c.inter = inter;
        c.force_config = cfg;
        c.seed = 900 + hidden + inter + tokens + cfg;
        RunMoeLayer(c);
      }
    }
  }
  // Rows not padded to whole stages are refused, naming the field.
  MoeGroupedGemmParams p;
  p.num_experts = 1;
  p.max_rows = 1;
  p.k = 96;
  p.expert_offsets = reinterpret_cast<const int32_t*>(uintptr_t{256});
  p.x = reinterpret_cast<const __nv_bfloat16*>(uintptr_t{256});
  p.ldx = 96;
  p.weight.data = reinterpret_cast<const void*>(uintptr_t{256});
  p.weight.scale = reinterpret_cast<const float*>(uintptr_t{256});
  p.weight.n = 128;
  p.expert_weight_stride = 128 * 96;
  const absl::Status st = LaunchMoeGroupedGemm(p, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("weight.ld"), std::string::npos) << st;
}

TEST(Sm80_MoeLayer, HiddenWiderThanOneCombineBlock) {
  SPAR_REQUIRE_GPU();
  // The combine splits each token's hidden columns over blocks of 1024:
  // two full blocks and a partial one, at decode-sized batches.
  for (int64_t tokens : {1, 5}) {
    MoeCase c;
    c.tokens = tokens;
    c.hidden = 2176;
    c.seed = 70 + tokens;
    RunMoeLayer(c);
  }
}

TEST(Sm80_MoeLayer, EveryGroupedConfig) {
  SPAR_REQUIRE_GPU();
  for (int cfg = 0; cfg < gemm::kNumTileConfigs; ++cfg) {
    MoeCase c;
    c.tokens = 150;
    c.force_config = cfg;
    c.seed = 20 + cfg;
    RunMoeLayer(c);
  }
}

// Split-K in the grouped GEMMs (the decode tiles, each split factor the
// heuristic may pick), at 1 and 40 tokens over 8 local experts: expert rows
// of one token and several tiles' worth. K = 1024 for both GEMMs: 4 stages
// of the 256-byte tiles, 8 or 16 of the narrower ones (a split above the
// stages is clamped, so it is skipped here).
TEST(Sm80_MoeLayer, GroupedSplitK) {
  SPAR_REQUIRE_GPU();
  for (int cfg = 0; cfg < gemm::kNumTileConfigs; ++cfg) {
    const gemm::TileConfig& tc = gemm::GetTileConfig(static_cast<gemm::TileConfigId>(cfg));
    if (tc.block_tokens > 16) continue;
    for (int splits : {2, 3, 4, 8}) {
      if (gemm::KStages(1024, 1, tc.sub) < splits) continue;
      for (int64_t tokens : {1, 40}) {
        MoeCase c;
        c.tokens = tokens;
        c.experts = 8;
        c.e0 = 0;
        c.e1 = 8;
        c.top_k = 2;
        c.hidden = 1024;
        c.inter = 1024;
        c.force_config = cfg;
        c.force_splits = splits;
        c.seed = 80 + cfg * 7 + splits + tokens;
        RunMoeLayer(c);
      }
    }
  }
}

// The grouped GEMMs read the work lists the permutation wrote (the
// engine's path), at decode and prefill sizes, a forced tile, all tokens
// on one expert and experts without rows.
TEST(Sm80_MoeLayer, PermutationWritesTheWorkLists) {
  SPAR_REQUIRE_GPU();
  for (const int64_t tokens : {1, 7, 150}) {
    for (const int cfg : {-1, static_cast<int>(gemm::TileConfigId::kT64)}) {
      MoeCase c;
      c.tokens = tokens;
      c.force_config = cfg;
      c.permute_work_lists = true;
      c.seed = 90 + tokens + cfg;
      RunMoeLayer(c);
    }
  }
  MoeCase c;
  c.tokens = 200;
  c.favoured = {10};
  c.permute_work_lists = true;
  c.seed = 99;
  RunMoeLayer(c);
}

// Which kernel a grouped launch takes (host policy, moe.h): the streaming
// kernel up to kMoeStreamAutoMaxRows rows (a few tokens' choices) unless the
// tile kernel is asked for; forced widths up to kMoeStreamMaxRows.
TEST(Sm80_MoeLayer, StreamKernelTakesAFewTokensChoices) {
  MoeGroupedGemmParams p;
  p.num_experts = 256;
  p.k = 6144;
  p.weight.n = 2048;
  p.max_rows = kMoeStreamAutoMaxRows;
  EXPECT_TRUE(MoeGroupedGemmUsesStreamKernel(p));
  EXPECT_EQ(MoeGroupedGemmBlockTokens(p), gemm::kStreamMaxTokens);
  p.force_stream_warps = -1;
  EXPECT_FALSE(MoeGroupedGemmUsesStreamKernel(p));
  p.force_stream_warps = 0;
  p.max_rows = kMoeStreamAutoMaxRows + 1;
  EXPECT_FALSE(MoeGroupedGemmUsesStreamKernel(p));
  p.force_stream_warps = 4;
  EXPECT_TRUE(MoeGroupedGemmUsesStreamKernel(p));
  p.max_rows = kMoeStreamMaxRows + 1;
  EXPECT_FALSE(MoeGroupedGemmUsesStreamKernel(p));
  p.max_rows = 1;
  p.force_stream_warps = 0;
  p.force_config = 0;
  EXPECT_FALSE(MoeGroupedGemmUsesStreamKernel(p));
}

// The tail split (moe.h): an expert's last partial tile of fewer than
// tail_rows rows runs in a second launch of a small tile. Forced on prefill
// and decode main tiles with tail tiles of 8, 16 and 32 tokens; experts
// wholly in the tail (fewer rows than the bound), every token on one expert
// (whole main tiles and a tail), tiled experts; bit for bit what the launch
// computes without it.
TEST(Sm80_MoeLayer, TailTilesOfPartialExperts) {
  SPAR_REQUIRE_GPU();
  using gemm::TileConfigId;
  struct Split {
    TileConfigId main, tail;
    int below;
  };
  const Split splits[] = {{TileConfigId::kT128W2F, TileConfigId::kT16W4F, 32},
                          {TileConfigId::kT128W2F, TileConfigId::kT8R128M2F, 64},
                          {TileConfigId::kT128W2F, TileConfigId::kT32, 100},
                          {TileConfigId::kT64W2, TileConfigId::kT8, 16},
                          {TileConfigId::kT32, TileConfigId::kT16W4F, 24}};
  for (const Split& sp : splits) {
    for (const int64_t tokens : {7, 150, 300}) {
      MoeCase c;
      c.tokens = tokens;
      if (tokens == 300) c.favoured = {10};
      c.force_config = static_cast<int>(sp.main);
      c.tail_config = static_cast<int>(sp.tail);
      c.tail_rows = sp.below;
      c.tail_equals_untailed = true;
      c.layout = tokens == 150 ? GemmWeightLayout::kTilesAcrossRows : GemmWeightLayout::kRowMajor;
      c.seed = 170 + tokens + static_cast<int>(sp.main) * 7 + static_cast<int>(sp.tail);
      RunMoeLayer(c);
    }
  }
}

// When a grouped launch splits off its tails (host policy, moe.h): prefill
// tiles automatically, decode tiles only when asked, never when the lists do
// not fit the workspace; a split launch wants no permutation work list.
TEST(Sm80_MoeLayer, TailSplitOnPrefillTiles) {
  MoeGroupedGemmParams p;
  p.num_experts = 256;
  p.k = 6144;
  p.weight.n = 2048;
  p.up.n = 2048;
  p.epilogue = GemmEpilogue::kSiluMul;
  p.max_rows = 4096 * 8;  // a 4096-token prefill chunk at top-8
  p.expected_rows_per_expert = 128;
  p.num_sms = 132;
  p.workspace_bytes = MoeGroupedGemmWorkspaceBytes(p.max_rows, p.num_experts);
  // The 128-token prefill tile, forced: the planner puts this gate/up on
  // 64-token tiles, which take no automatic tail split.
  p.force_config = static_cast<int>(gemm::TileConfigId::kT128W2F);
  ASSERT_GE(gemm::GetTileConfig(MoeGroupedGemmPlan(p).config).block_tokens, kMoeTailMinTileTokens);
  MoeTailPlan t = MoeGroupedGemmTailPlan(p);
  EXPECT_EQ(t.below, kMoeTailAutoRows);
  EXPECT_EQ(t.config, kMoeTailConfig);
  EXPECT_EQ(MoeGroupedGemmBlockTokens(p), 0);
  p.tail_rows = 0;
  EXPECT_EQ(MoeGroupedGemmTailPlan(p).below, 0);
  EXPECT_EQ(MoeGroupedGemmBlockTokens(p), gemm::GetTileConfig(MoeGroupedGemmPlan(p).config).block_tokens);
  p.tail_rows = -1;
  p.workspace_bytes = 16;
  EXPECT_EQ(MoeGroupedGemmTailPlan(p).below, 0);
  // Planned 64-token tiles: no automatic tail split.
  p.force_config = -1;
  p.workspace_bytes = MoeGroupedGemmWorkspaceBytes(p.max_rows, p.num_experts);
  ASSERT_LT(gemm::GetTileConfig(MoeGroupedGemmPlan(p).config).block_tokens, kMoeTailMinTileTokens);
  EXPECT_EQ(MoeGroupedGemmTailPlan(p).below, 0);
  // Decode: 64 tokens, 2 rows an expert.
  p.max_rows = 64 * 8;
  p.expected_rows_per_expert = 2;
  p.workspace_bytes = MoeGroupedGemmWorkspaceBytes(p.max_rows, p.num_experts);
  ASSERT_LT(gemm::GetTileConfig(MoeGroupedGemmPlan(p).config).block_tokens, kMoeTailMinTileTokens);
  EXPECT_EQ(MoeGroupedGemmTailPlan(p).below, 0);
  p.tail_rows = 4;
  p.workspace_bytes = size_t{1} << 20;  // room for one tail entry per expert beside the main list
  p.force_tail_config = static_cast<int>(gemm::TileConfigId::kT8);
  t = MoeGroupedGemmTailPlan(p);
  EXPECT_EQ(t.below, 4);
  EXPECT_EQ(t.config, gemm::TileConfigId::kT8);
}

// The streaming kernel on decode-sized layers (<= kMoeStreamMaxRows rows;
// forced past kMoeStreamAutoMaxRows): every block width, with and without the
// permutation's work lists, one row per expert, several entries of 8 rows
// on one expert (100 tokens, every first choice the same expert), experts
// without rows.
TEST(Sm80_MoeLayer, StreamKernelEveryWidth) {
  SPAR_REQUIRE_GPU();
  for (const int warps : {1, 2, 4, 8}) {
    for (const int64_t tokens : {1, 7, 100}) {
      MoeCase c;
      c.tokens = tokens;
      if (tokens == 100) c.favoured = {10};
      c.force_stream_warps = warps;
      c.permute_work_lists = warps % 4 == 0;
      c.seed = 110 + tokens + warps;
      RunMoeLayer(c);
    }
  }
}

// Tiled expert weights (both tile orders of GemmWeightLayout: each expert's
// rows padded to 16, the stride with them): the planner's tiles, forced
// decode and prefill tiles, every streaming width, the permutation's work
// lists, all tokens on one expert, and an expert width of 200 (gate/up rows
// ending inside a 16-row tile; the down projection's K a tail of padded rows).
TEST(Sm80_MoeLayer, TiledExperts) {
  SPAR_REQUIRE_GPU();
  const int cfgs[] = {-1, static_cast<int>(gemm::TileConfigId::kT8), static_cast<int>(gemm::TileConfigId::kT64),
                      static_cast<int>(gemm::TileConfigId::kT128W2F)};
  for (const GemmWeightLayout layout : {GemmWeightLayout::kTilesAlongK, GemmWeightLayout::kTilesAcrossRows}) {
    for (const int64_t tokens : {1, 7, 150}) {
      for (const int cfg : cfgs) {
        MoeCase c;
        c.tokens = tokens;
        c.force_config = cfg;
        c.permute_work_lists = cfg == -1;
        c.layout = layout;
        c.seed = 130 + tokens + cfg;
        RunMoeLayer(c);
      }
    }
    for (const int warps : {1, 2, 4, 8}) {
      MoeCase c;
      c.tokens = 7;
      c.force_stream_warps = warps;
      c.layout = layout;
      c.seed = 140 + warps;
      RunMoeLayer(c);
    }
    MoeCase one;
    one.tokens = 200;
    one.favoured = {10};
    one.permute_work_lists = true;
    one.layout = layout;
    one.seed = 150;
    RunMoeLayer(one);
    MoeCase narrow;
    narrow.tokens = 40;
    narrow.inter = 200;
    narrow.layout = layout;
    narrow.seed = 151;
    RunMoeLayer(narrow);
  }
}

TEST(Sm80_MoeLayer, AllTokensOnOneExpert) {
  SPAR_REQUIRE_GPU();
  for (int cfg : {-1, static_cast<int>(gemm::TileConfigId::kT8), static_cast<int>(gemm::TileConfigId::kT128)}) {
    MoeCase c;
    c.tokens = 200;
    c.favoured = {10};  // every token's first choice; 3 more random ones
    c.force_config = cfg;
    c.seed = 30;
    RunMoeLayer(c);
  }
}

TEST(Sm80_MoeLayer, SingleExpertHitWithDownKEquals128) {
  SPAR_REQUIRE_GPU();
  MoeCase c;
  c.tokens = 70;
  c.top_k = 1;
  c.favoured = {17};
  c.inter = 128;  // down projection K = 128
  c.seed = 40;
  RunMoeLayer(c);
}

TEST(Sm80_MoeLayer, AllTokensRoutedToOtherRanks) {
  SPAR_REQUIRE_GPU();
  MoeCase c;
  c.tokens = 33;
  c.favoured = {0, 1, 2, 30};  // none local to [8, 24)
  c.seed = 50;
  RunMoeLayer(c);  // output = shared expert + residual
  c.shared = false;
  c.residual = true;
  RunMoeLayer(c);
}

TEST(Sm80_MoeLayer, AllExpertsLocalNoShared) {
  SPAR_REQUIRE_GPU();
  MoeCase c;
  c.tokens = 64;
  c.e0 = 0;
  c.e1 = 32;
  c.shared = false;
  c.residual = false;
  c.seed = 60;
  RunMoeLayer(c);
}

}  // namespace
}  // namespace spar
