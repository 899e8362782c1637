// gemm_bench's MoE layer: 256 experts, top-8, hidden 6144,
// moe_intermediate 2048 (GLM-5's), FP8 block-128 weights: the grouped GEMMs
// planned and swept, the whole layer, and the routing launches alone.
#include "kernels/cuda/common/arch.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <vector>

#include "base/numeric.h"
#include "bench/gemm/gemm_bench_common.h"
#include "kernels/cuda/gemm/gemm_config.h"
#include "kernels/cuda/gemm/moe.h"
#include "kernels/cuda/gemm/w8a16_tiles.h"

namespace spar::gemm_bench {
namespace {

// The routing launches a decode step makes around its grouped GEMMs, each
// timed alone as graph replays (issue 21's "routing + permutation <= 6 us at
// batch 1-64"): route + permute writing the two GEMMs' work lists
// (LaunchMoeRoutePermute, as the engine from two tokens on), at one token
// the router's bf16 GEMV in the same launch (LaunchMoeRouterRoutePermute, as
// the engine; 0 otherwise), and the weighted combine.
struct RoutingTimes {
  double route_permute = 0, router_route_permute = 0, combine = 0;
};

RoutingTimes TimeRouting(const MoeRouteParams& route, const MoePermuteParams& perm, const MoeGroupedGemmParams& gu,
                         const MoeGroupedGemmParams& dn, const MoeCombineParams& cb, const __nv_bfloat16* x,
                         int per_batch) {
  const int64_t rows = route.tokens * route.top_k;
  const size_t list_bytes = MoeGroupedGemmWorkspaceBytes(rows, perm.expert_end - perm.expert_begin);
  int32_t* done = DeviceAlloc<int32_t>(1);
  uint8_t* lists = DeviceAlloc<uint8_t>(kMaxPermuteWorkLists * list_bytes);
  CheckCuda(cudaMemset(done, 0, sizeof(int32_t)), "done counter");
  MoePermuteParams with_lists = perm;
  for (const MoeGroupedGemmParams* g : {&gu, &dn}) {
    RequestPermuteWorkList(&with_lists, MoeGroupedGemmBlockTokens(*g), lists, list_bytes);
  }
  RoutingTimes t;
  t.route_permute = TimePerLaunchGraph(
      [&](int) { Check(LaunchMoeRoutePermute(route, with_lists, done, g_stream), "route_permute"); }, per_batch, 5, 2);
  __nv_bfloat16* router_w = nullptr;
  if (route.tokens == 1) {
    const int64_t hidden = cb.hidden;
    router_w = DeviceAlloc<__nv_bfloat16>(route.num_experts * hidden);
    FillBf16(router_w, route.num_experts * hidden, 24);
    CheckCuda(cudaDeviceSynchronize(), "router weights");
    MoeRouterParams router;
    router.x = x;
    router.weight = router_w;
    router.ld = hidden;
    router.hidden = hidden;
    router.logits = const_cast<float*>(route.logits);
    if (MoeRouterRoutePermuteSupported(router, route)) {
      t.router_route_permute = TimePerLaunchGraph(
          [&](int) { Check(LaunchMoeRouterRoutePermute(router, route, with_lists, done, g_stream), "router"); },
          per_batch, 5, 2);
    }
  }
  t.combine = TimePerLaunchGraph([&](int) { Check(LaunchMoeCombine(cb, g_stream), "combine"); }, per_batch, 5, 2);
  CheckCuda(cudaDeviceSynchronize(), "routing");
  for (void* ptr : std::initializer_list<void*>{done, lists, router_w}) cudaFree(ptr);
  return t;
}

}  // namespace

void BenchMoe(int64_t tokens, void* split_ws, size_t split_ws_bytes, const Options& opt) {
  const int E = 256, K = 8;
  const int64_t H = 6144, I = 2048;
  const int64_t rows = tokens * K;
  static uint8_t *gate = nullptr, *up = nullptr, *down = nullptr;
  static float *sg = nullptr, *su = nullptr, *sd = nullptr;
  const int64_t gu_stride = I * H, d_stride = H * I;
  const int64_t gu_sstride = (I / 128) * (H / 128), d_sstride = (H / 128) * (I / 128);
  if (gate == nullptr) {
    gate = DeviceAlloc<uint8_t>(E * gu_stride);
    up = DeviceAlloc<uint8_t>(E * gu_stride);
    down = DeviceAlloc<uint8_t>(E * d_stride);
    sg = DeviceAlloc<float>(E * gu_sstride);
    su = DeviceAlloc<float>(E * gu_sstride);
    sd = DeviceAlloc<float>(E * d_sstride);
    FillE4m3(gate, E * gu_stride, 11);
    FillE4m3(up, E * gu_stride, 12);
    FillE4m3(down, E * d_stride, 13);
    FillScales(sg, E * gu_sstride, 14);
    FillScales(su, E * gu_sstride, 15);
    FillScales(sd, E * d_sstride, 16);
  }
  __nv_bfloat16* x = DeviceAlloc<__nv_bfloat16>(tokens * H);
  __nv_bfloat16* h = DeviceAlloc<__nv_bfloat16>(rows * I);
  __nv_bfloat16* yd = DeviceAlloc<__nv_bfloat16>(rows * H);
  __nv_bfloat16* out = DeviceAlloc<__nv_bfloat16>(tokens * H);
  float* logits = DeviceAlloc<float>(tokens * E);
  float* bias = DeviceAlloc<float>(E);
  float* weights = DeviceAlloc<float>(rows);
  int32_t *ids = DeviceAlloc<int32_t>(rows), *offsets = DeviceAlloc<int32_t>(E + 1), *sorted = DeviceAlloc<int32_t>(rows),
          *slot = DeviceAlloc<int32_t>(rows);
  FillBf16(x, tokens * H, 21);
  FillF32(logits, tokens * E, 22, 3.0f);
  // The selection bias: by default a small one, so the random logits spread
  // the rows about evenly over the experts; --moe-bias widens it so that
  // some experts get several times the mean and others none, as a model's
  // real routing does (a tile plan should win there too, not only on even
  // routing). The routing line printed below says how uneven it came out.
  FillF32(bias, E, 23, opt.moe_bias);
  const size_t ws_bytes = MoeGroupedGemmWorkspaceBytes(rows, E);
  void* ws = DeviceAlloc<uint8_t>(ws_bytes);
  CheckCuda(cudaDeviceSynchronize(), "fill moe inputs");  // g_stream does not wait for the legacy stream

  MoeRouteParams route;
  route.tokens = tokens;
  route.num_experts = E;
  route.top_k = K;
  route.routed_scaling = 2.5f;
  route.logits = logits;
  route.ld_logits = E;
  route.bias = bias;
  route.expert_ids = ids;
  route.expert_weights = weights;
  MoePermuteParams perm;
  perm.tokens = tokens;
  perm.top_k = K;
  perm.expert_ids = ids;
  perm.expert_begin = 0;
  perm.expert_end = E;
  perm.expert_offsets = offsets;
  perm.sorted_token = sorted;
  perm.slot = slot;
  MoeGroupedGemmParams gu;
  gu.num_experts = E;
  gu.expert_offsets = offsets;
  gu.max_rows = rows;
  gu.expected_rows_per_expert = std::max<int64_t>(1, rows / E);
  gu.k = H;
  gu.x = x;
  gu.ldx = H;
  gu.x_row_index = sorted;
  // I and H are multiples of 16: a tiled expert needs no padding rows.
  gu.weight = {GemmWeightType::kFp8Block128, gate, sg, I, 0, g_layout};
  gu.up = {GemmWeightType::kFp8Block128, up, su, I, 0, g_layout};
  gu.expert_weight_stride = gu_stride;
  gu.expert_scale_stride = gu_sstride;
  gu.epilogue = GemmEpilogue::kSiluMul;
  gu.y = h;
  gu.ldy = I;
  gu.workspace = ws;
  gu.workspace_bytes = ws_bytes;
  gu.force_stream_warps = opt.stream_warps;
  gu.tail_rows = opt.tail_rows;
  gu.force_tail_config = opt.tail_config;
  MoeGroupedGemmParams dn = gu;
  dn.k = I;
  dn.x = h;
  dn.ldx = I;
  dn.x_row_index = nullptr;
  dn.weight = {GemmWeightType::kFp8Block128, down, sd, H, 0, g_layout};
  dn.up = GemmWeight{};
  dn.expert_weight_stride = d_stride;
  dn.expert_scale_stride = d_sstride;
  dn.epilogue = GemmEpilogue::kNone;
  dn.y = yd;
  dn.ldy = H;
  MoeCombineParams cb;
  cb.tokens = tokens;
  cb.top_k = K;
  cb.hidden = H;
  cb.expert_out = yd;
  cb.ld_expert = H;
  cb.slot = slot;
  cb.weights = weights;
  cb.out = out;
  cb.ld_out = H;

  Check(LaunchMoeRoute(route, g_stream), "route");
  Check(LaunchMoePermute(perm, g_stream), "permute");
  CheckCuda(cudaDeviceSynchronize(), "route");
  std::vector<int32_t> off(E + 1);
  CheckCuda(cudaMemcpy(off.data(), offsets, off.size() * 4, cudaMemcpyDeviceToHost), "offsets");
  const int hit = bench::PrintMoeRouting(tokens, off, opt.moe_bias);
  const double expert_bytes = 3.0 * I * H + 4.0 * (2 * gu_sstride + d_sstride);
  const double hit_bytes = hit * expert_bytes;
  const double flops = 2.0 * rows * (2 * I * H + H * I);

  auto gemms = [&](int) {
    Check(LaunchMoeGroupedGemm(gu, g_stream), "gate_up");
    Check(LaunchMoeGroupedGemm(dn, g_stream), "down");
  };
  auto layer = [&](int) {
    Check(LaunchMoeRoute(route, g_stream), "route");
    Check(LaunchMoePermute(perm, g_stream), "permute");
    gemms(0);
    Check(LaunchMoeCombine(cb, g_stream), "combine");
  };
  const int per_batch = tokens <= 64 ? 10 : 3;
  const double us_gemm_stream = TimePerLaunch(gemms, per_batch, 5, 2);
  const double us_gemm = TimePerLaunchGraph(gemms, per_batch, 5, 2);
  const double us_layer_stream = TimePerLaunch(layer, per_batch, 5, 2);
  const double us_layer = TimePerLaunchGraph(layer, per_batch, 5, 2);
  const RoutingTimes routing = TimeRouting(route, perm, gu, dn, cb, x, per_batch);
  {  // Grouped (configuration, split) pairs, forced, each GEMM on its own
     // (calibrates the heuristic): graph replays of 4 launches.
    std::string all;
    for (int which = 0; which < 2; ++which) {
      const MoeGroupedGemmParams& base = which == 0 ? gu : dn;
      for (int cfg = 0; cfg < gemm::kNumTileConfigs; ++cfg) {
        const gemm::TileConfig& tc = gemm::GetTileConfig(static_cast<gemm::TileConfigId>(cfg));
        if ((tokens <= 64) != (tc.block_tokens <= 16)) continue;
        if ((base.k % tc.row_bytes_per_stage()) != 0) continue;
        for (int splits : {1, 2, 3, 4, 6, 8}) {
          if (splits > 1 && tokens > 64) break;
          MoeGroupedGemmParams g2 = base;
          g2.force_config = cfg;
          g2.force_splits = splits;
          g2.split_workspace = split_ws;  // forced splits only: the engine's launches do not split
          g2.split_workspace_bytes = split_ws_bytes;
          if (MoeGroupedGemmPlan(g2).splits != splits) continue;  // clamped or no room: not this plan
          const double t = TimePerLaunchGraph([&](int) { Check(LaunchMoeGroupedGemm(g2, g_stream), "grouped"); },
                                              4, 5, 1);
          char buf[80];
          std::snprintf(buf, sizeof(buf), " %s:%s/s%d:%.1f", which == 0 ? "gu" : "dn", tc.name, splits, t);
          all += buf;
        }
      }
    }
    std::printf("  sweepall moe M=%lld%s\n", static_cast<long long>(tokens), all.c_str());
  }

  // Reference for the last token (its experts' weights copied to the host).
  layer(0);
  CheckCuda(cudaDeviceSynchronize(), "layer");
  std::vector<int32_t> hids(rows);
  std::vector<float> hw(rows);
  std::vector<uint16_t> hx(tokens * H), hout(tokens * H);
  CheckCuda(cudaMemcpy(hids.data(), ids, rows * 4, cudaMemcpyDeviceToHost), "ids");
  CheckCuda(cudaMemcpy(hw.data(), weights, rows * 4, cudaMemcpyDeviceToHost), "w");
  CheckCuda(cudaMemcpy(hx.data(), x, hx.size() * 2, cudaMemcpyDeviceToHost), "x");
  CheckCuda(cudaMemcpy(hout.data(), out, hout.size() * 2, cudaMemcpyDeviceToHost), "out");
  auto deq = [&](const uint8_t* w, const float* s, int64_t n, int64_t kk, int64_t e) {
    std::vector<uint8_t> raw(n * kk);
    std::vector<float> sc((n / 128) * (kk / 128));
    CheckCuda(cudaMemcpy(raw.data(), w + e * n * kk, raw.size(), cudaMemcpyDeviceToHost), "w");
    if (IsTiled(g_layout)) raw = gemm::UntileGemmRows(raw, n, kk, TileOrderOf(g_layout));  // n % 16 == 0: no padding
    CheckCuda(cudaMemcpy(sc.data(), s + e * sc.size(), sc.size() * 4, cudaMemcpyDeviceToHost), "s");
    std::vector<float> f(n * kk);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < kk; ++j) f[i * kk + j] = E4m3ToFloat(raw[i * kk + j]) * sc[(i / 128) * (kk / 128) + j / 128];
    return f;
  };
  double max_ref = 0, max_diff = 0;
  for (int64_t t : {tokens - 1}) {
    std::vector<double> acc(H, 0.0);
    for (int j = 0; j < K; ++j) {
      const int e = hids[t * K + j];
      const std::vector<float> g = deq(gate, sg, I, H, e), u = deq(up, su, I, H, e), d = deq(down, sd, H, I, e);
      std::vector<float> hh(I);
      for (int64_t i = 0; i < I; ++i) {
        double a = 0, b = 0;
        for (int64_t c = 0; c < H; ++c) {
          const double xv = Bf16ToFloat(hx[t * H + c]);
          a += xv * g[i * H + c];
          b += xv * u[i * H + c];
        }
        hh[i] = RoundToBf16(static_cast<float>(a / (1.0 + std::exp(-a)) * b));
      }
      for (int64_t o = 0; o < H; ++o) {
        double a = 0;
        for (int64_t i = 0; i < I; ++i) a += static_cast<double>(hh[i]) * d[o * I + i];
        acc[o] += hw[t * K + j] * a;
      }
    }
    for (int64_t o = 0; o < H; ++o) {
      const double got = Bf16ToFloat(hout[t * H + o]);
      max_ref = std::max(max_ref, std::fabs(acc[o]));
      max_diff = std::max(max_diff, std::isfinite(got) ? std::fabs(got - acc[o]) : INFINITY);
    }
  }
  const double err = max_diff / std::max(max_ref, 1e-30);
  auto plan_name = [&](const MoeGroupedGemmParams& g) {
    if (MoeGroupedGemmUsesStreamKernel(g)) return std::string("stream");
    const MoeTailPlan tail = MoeGroupedGemmTailPlan(g);
    return PlanName(MoeGroupedGemmPlan(g)) +
           (tail.below > 0 ? "+tail<" + std::to_string(tail.below) + ":" + gemm::GetTileConfig(tail.config).name : "");
  };
  const std::string plan = plan_name(gu) + ";" + plan_name(dn);
  Emit({"moe_gemms", tokens, hit, H, plan, us_gemm, flops / us_gemm * 1e-6, hit_bytes / us_gemm * 1e-3,
        100.0 * (hit_bytes / (g_copy_gbs * 1e3)) / us_gemm, err, us_gemm_stream});
  Emit({"moe_layer", tokens, hit, H, "route..combine", us_layer, flops / us_layer * 1e-6, hit_bytes / us_layer * 1e-3,
        100.0 * (hit_bytes / (g_copy_gbs * 1e3)) / us_layer, err, us_layer_stream});
  // The launches around the GEMMs, alone (no FLOP or byte rates).
  Emit({"moe_route_permute", tokens, E, H, "route+permute+lists", routing.route_permute, 0, 0, 0, 0, 0});
  if (routing.router_route_permute > 0) {
    Emit({"moe_router_route_permute", tokens, E, H, "router GEMV+route+permute+lists", routing.router_route_permute, 0, 0,
          0, 0, 0});
  }
  Emit({"moe_combine", tokens, E, H, "combine", routing.combine, 0, 0, 0, 0, 0});
  for (void* ptr : std::initializer_list<void*>{x, h, yd, out, logits, bias, weights, ids, offsets, sorted, slot, ws}) {
    cudaFree(ptr);
  }
}

}  // namespace spar::gemm_bench
