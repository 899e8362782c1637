// W8A16 GEMM and grouped-MoE benchmark.
//
// Examples:
//   gemm_bench                       # GLM-5 projections x M in {1,16,64,256,2048} + MoE 64/4096 tokens
//   gemm_bench --csv out.csv         # also write one CSV row per case
//   gemm_bench --sweep               # + every (config, split) per shape: calibrates the heuristic
//   gemm_bench --quick               # M in {1, 64} only, no MoE at 4096 tokens
//   gemm_bench --shapes mlp_gate_up,q_b --ms 1,16 --no-moe   # a subset
//   gemm_bench --moe-tokens 1,8,64   # the MoE layer at these token counts (decode tiles swept up to 64)
//   gemm_bench --force 10,4          # main measurement with configuration 10, splits 4 (profiling)
//   gemm_bench --stream-warps 4      # <= 32 tokens (and the MoE): the streaming kernel, 4 warps a block
//                                    # (-1: the tile kernel; the MoE streams up to 40 rows by default, moe.h)
//   gemm_bench --moe-tail 32,T16W4F  # the grouped GEMMs' tail split (moe.h): bound, tile (0: off; default auto)
//   gemm_bench --probe               # + read-only stream ceiling and empty-kernel launch cost
//   gemm_bench --tiled along-k       # weights in 16-row x 64-byte tiles (w8a16_tiles.h; or across-rows)
//
// Per case: median µs per launch of back-to-back launches captured in a CUDA
// graph and replayed (GPU time, as a serving engine replays its decode step),
// and the same launches enqueued one by one from the host ("stream", which
// adds whatever host launch cost the GPU waits for); CUDA events, warm-up,
// the weights rotated over enough copies to exceed L2 (every launch reads
// its weights from DRAM, as in serving); TFLOP/s; GB/s of weight bytes (e4m3
// + scales); % of the copy roofline measured in this run (weight bytes /
// copy bandwidth, where copy bandwidth counts bytes read + written); max
// error vs a CPU reference on sampled outputs (relative to max |ref|).
#include "kernels/cuda/common/arch.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "base/numeric.h"
#include "base/rng.h"
#include "bench/common/bench_util.h"
#include "bench/common/cublas_peer.h"
#include "bench/gemm/memory_probes.h"
#include "kernels/cuda/common/device_info.h"
#include "kernels/cuda/gemm/gemm_config.h"
#include "kernels/cuda/gemm/moe.h"
#include "kernels/cuda/gemm/w8a16_gemm.h"
#include "kernels/cuda/gemm/w8a16_tiles.h"

namespace spar {
namespace {

using bench::CheckCuda;
using bench::DeviceAlloc;
using bench::GraphMedianMicros;

// ---- device-side random fills (the MoE bank is ~10 GB) --------------------
// Random e4m3 bytes without the NaN codes (0x7f, 0xff).
__global__ void FillE4m3(uint8_t* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n / 8; i += size_t{gridDim.x} * blockDim.x) {
    uint64_t h = SplitMix64(seed ^ (i * 0x2545f4914f6cdd1dull));
    for (int b = 0; b < 8; ++b) {
      const uint64_t byte = (h >> (8 * b)) & 0xff;
      if ((byte & 0x7f) == 0x7f) h ^= uint64_t{1} << (8 * b);
    }
    reinterpret_cast<uint64_t*>(p)[i] = h;
  }
}

// Scales in [2^-9, 2^-7): like real weight_scale_inv values.
__global__ void FillScales(float* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const double u = static_cast<double>(SplitMix64(seed ^ i) >> 11) * (1.0 / 9007199254740992.0);
    p[i] = static_cast<float>(std::ldexp(1.0 + u, -9 + static_cast<int>(u * 2)));
  }
}

// bf16 uniform in [-1, 1).
__global__ void FillBf16(__nv_bfloat16* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const double u = static_cast<double>(SplitMix64(seed ^ i) >> 11) * (1.0 / 9007199254740992.0);
    p[i] = __float2bfloat16(static_cast<float>(2.0 * u - 1.0));
  }
}

__global__ void FillF32(float* p, size_t n, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const double u = static_cast<double>(SplitMix64(seed ^ i) >> 11) * (1.0 / 9007199254740992.0);
    p[i] = static_cast<float>((2.0 * u - 1.0) * scale);
  }
}

void Check(const absl::Status& st, const char* what) {
  if (!st.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, std::string(st.message()).c_str());
    std::exit(1);
  }
}

// All benchmark work runs on this stream (graph capture needs a non-legacy stream).
cudaStream_t g_stream = nullptr;
double g_copy_gbs = 0;  // device-to-device copy, bytes read + written

// Median µs per launch of fn(i) (i = launch index, for weight rotation):
// `batches` timed batches of `per_batch` back-to-back launches, enqueued
// from the host as they run ("stream" timing: includes any host launch cost
// the GPU waits for).
template <typename Fn>
double TimePerLaunch(Fn&& fn, int per_batch, int batches = 7, int warmup = 3) {
  for (int i = 0; i < warmup; ++i) fn(i);
  CheckCuda(cudaStreamSynchronize(g_stream), "warmup");
  cudaEvent_t a, b;
  CheckCuda(cudaEventCreate(&a), "event");
  CheckCuda(cudaEventCreate(&b), "event");
  std::vector<double> t;
  int idx = 0;
  for (int r = 0; r < batches; ++r) {
    CheckCuda(cudaEventRecord(a, g_stream), "record");
    for (int i = 0; i < per_batch; ++i) fn(idx++);
    CheckCuda(cudaEventRecord(b, g_stream), "record");
    CheckCuda(cudaEventSynchronize(b), "sync");
    float ms = 0;
    CheckCuda(cudaEventElapsedTime(&ms, a, b), "elapsed");
    t.push_back(ms * 1000.0 / per_batch);
  }
  CheckCuda(cudaGetLastError(), "timed launches");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// The same launches captured once into a CUDA graph and replayed
// (bench_util.h GraphMedianMicros): the GPU time of back-to-back kernels
// without host launch overhead (how a serving engine replays its decode
// step). Median over `batches` replays.
template <typename Fn>
double TimePerLaunchGraph(Fn&& fn, int per_batch, int batches = 7, int warmup = 3) {
  for (int i = 0; i < warmup; ++i) fn(i);
  return GraphMedianMicros([&](int i) { fn(i); }, g_stream, per_batch, batches);
}

struct Options {
  bool quick = false;
  bool sweep = false;
  bool moe = true;
  bool probe = false;          // read-only streaming ceiling and empty-kernel cost
  std::string csv;
  std::string shapes;          // comma list of shape names (empty: all)
  std::vector<int64_t> ms;     // token counts (empty: the default set)
  std::vector<int64_t> moe_tokens;  // MoE layer token counts (empty: 64, 4096; --quick: 64)
  int force_config = -1;       // main measurement only (profiling)
  int force_splits = 1;
  int stream_warps = 0;        // W8A16GemmParams::force_stream_warps (-1: the tile kernel)
  int tail_rows = -1;          // MoeGroupedGemmParams::tail_rows (--moe-tail)
  int tail_config = -1;        // MoeGroupedGemmParams::force_tail_config
  GemmWeightLayout layout = GemmWeightLayout::kRowMajor;  // --tiled along-k|across-rows (w8a16_tiles.h)
};

GemmWeightLayout g_layout = GemmWeightLayout::kRowMajor;  // every weight's (--tiled)

std::vector<int64_t> ParseList(const std::string& s) {
  std::vector<int64_t> v;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t end = s.find(',', pos);
    if (end == std::string::npos) end = s.size();
    v.push_back(std::atoll(s.substr(pos, end - pos).c_str()));
    pos = end + 1;
  }
  return v;
}

struct Row {
  std::string name;
  int64_t m, n, k;
  std::string plan;
  double us, tflops, gbs, roof_pct, max_err;
  double us_stream = 0;  // host-enqueued launches (us: graph replay)
};


// --csv: rows are written as they are measured, so a run cut short (time
// limit, failed launch) still leaves every finished row.
FILE* g_csv = nullptr;

void Emit(const Row& r) {
  if (g_csv != nullptr) {
    std::fprintf(g_csv, "%s,%lld,%lld,%lld,%s,%.3f,%.2f,%.1f,%.2f,%.3e,%.0f,%.3f\n", r.name.c_str(),
                 static_cast<long long>(r.m), static_cast<long long>(r.n), static_cast<long long>(r.k), r.plan.c_str(),
                 r.us, r.tflops, r.gbs, r.roof_pct, r.max_err, g_copy_gbs, r.us_stream);
    std::fflush(g_csv);
  }
  std::printf(
      "%-12s M=%-5lld N=%-6lld K=%-6lld %-16s %9.2f us %7.1f TFLOP/s %7.0f GB/s %6.1f%% roof  err %.2e  (stream %.2f us)\n",
      r.name.c_str(), static_cast<long long>(r.m), static_cast<long long>(r.n), static_cast<long long>(r.k),
      r.plan.c_str(), r.us, r.tflops, r.gbs, r.roof_pct, r.max_err, r.us_stream);
  std::fflush(stdout);
}

std::string PlanName(const gemm::GemmPlan& p) {
  return std::string(gemm::GetTileConfig(p.config).name) + "/s" + std::to_string(p.splits);
}

// ---- dense shapes ----------------------------------------------------------
struct Segment {
  int64_t n;
  bool fp8;
};
struct Shape {
  const char* name;
  int64_t k;
  std::vector<Segment> segs;
};

float E4m3Host(uint8_t v) { return E4m3ToFloat(v); }

void BenchDense(const Shape& shape, const std::vector<int64_t>& ms, const Options& opt, void* ws, size_t ws_bytes) {
  const int64_t k = shape.k;
  int64_t n_total = 0, weight_bytes = 0;
  for (const Segment& s : shape.segs) {
    n_total += s.n;
    weight_bytes += s.fp8 ? s.n * k + ((s.n + 127) / 128) * ((k + 127) / 128) * 4 : s.n * k * 2;
  }
  // Enough copies that consecutive launches never find their weights in L2.
  const int copies = static_cast<int>(std::max<int64_t>(2, (int64_t{320} << 20) / weight_bytes + 1));
  struct SegCopies {
    std::vector<uint8_t*> w;
    std::vector<float*> s;
  };
  std::vector<SegCopies> segs(shape.segs.size());
  for (size_t si = 0; si < shape.segs.size(); ++si) {
    const Segment& s = shape.segs[si];
    const size_t bytes = gemm::GemmTiledRows(s.n) * k * (s.fp8 ? 1 : 2);  // tiled: rows padded to 16
    const size_t nscale = ((s.n + 127) / 128) * ((k + 127) / 128);
    for (int c = 0; c < copies; ++c) {
      uint8_t* w = DeviceAlloc<uint8_t>(bytes);
      if (s.fp8) {
        FillE4m3<<<1024, 256>>>(w, bytes, 1000 + si);  // same values in every copy
        float* sc = DeviceAlloc<float>(nscale);
        FillScales<<<64, 256>>>(sc, nscale, 2000 + si);
        segs[si].s.push_back(sc);
      } else {
        FillBf16<<<1024, 256>>>(reinterpret_cast<__nv_bfloat16*>(w), bytes / 2, 3000 + si);
        segs[si].s.push_back(nullptr);
      }
      segs[si].w.push_back(w);
    }
  }
  CheckCuda(cudaDeviceSynchronize(), "fill weights");

  // Host copies of sampled weight rows for the reference.
  const int kSampleCols = 48, kSampleRows = 24;
  std::vector<int64_t> cols;
  for (int i = 0; i < kSampleCols; ++i) cols.push_back((i * 9973 + i * i * 31) % n_total);
  std::vector<std::vector<float>> wrow(kSampleCols, std::vector<float>(k));
  for (int i = 0; i < kSampleCols; ++i) {
    int64_t j = cols[i];
    size_t si = 0;
    while (j >= shape.segs[si].n) j -= shape.segs[si++].n;
    const Segment& s = shape.segs[si];
    std::vector<uint8_t> raw(k * (s.fp8 ? 1 : 2));
    if (IsTiled(g_layout)) {  // the row's 64-byte pieces, one a tile
      const int64_t row_bytes = static_cast<int64_t>(raw.size());
      for (int64_t c = 0; c < row_bytes; c += gemm::kGemmTileRowBytes) {
        CheckCuda(cudaMemcpy(raw.data() + c,
                             segs[si].w[0] + gemm::GemmTiledOffset(j, c, s.n, row_bytes, TileOrderOf(g_layout)),
                             gemm::kGemmTileRowBytes, cudaMemcpyDeviceToHost),
                  "row piece");
      }
    } else {
      CheckCuda(cudaMemcpy(raw.data(), segs[si].w[0] + j * raw.size(), raw.size(), cudaMemcpyDeviceToHost), "row");
    }
    if (s.fp8) {
      const int64_t sc_cols = (k + 127) / 128;
      std::vector<float> srow(sc_cols);
      CheckCuda(cudaMemcpy(srow.data(), segs[si].s[0] + (j / 128) * sc_cols, sc_cols * 4, cudaMemcpyDeviceToHost),
                "scale row");
      for (int64_t c = 0; c < k; ++c) wrow[i][c] = E4m3Host(raw[c]) * srow[c / 128];
    } else {
      for (int64_t c = 0; c < k; ++c) wrow[i][c] = Bf16ToFloat(static_cast<uint16_t>(raw[2 * c] | (raw[2 * c + 1] << 8)));
    }
  }

  for (int64_t m : ms) {
    __nv_bfloat16* x = DeviceAlloc<__nv_bfloat16>(m * k);
    __nv_bfloat16* y = DeviceAlloc<__nv_bfloat16>(m * n_total);
    FillBf16<<<1024, 256>>>(x, m * k, 77 + m);
    CheckCuda(cudaDeviceSynchronize(), "fill x");  // g_stream does not wait for the legacy stream
    W8A16GemmParams p;
    p.m = m;
    p.k = k;
    p.x = x;
    p.ldx = k;
    p.num_segments = static_cast<int>(shape.segs.size());
    p.y = y;
    p.ldy = n_total;
    p.workspace = ws;
    p.workspace_bytes = ws_bytes;
    auto set_copy = [&](int c) {
      for (size_t si = 0; si < shape.segs.size(); ++si) {
        p.segments[si].type = shape.segs[si].fp8 ? GemmWeightType::kFp8Block128 : GemmWeightType::kBf16;
        p.segments[si].data = segs[si].w[c];
        p.segments[si].scale = segs[si].s[c];
        p.segments[si].n = shape.segs[si].n;
        p.segments[si].layout = g_layout;
      }
    };
    set_copy(0);
    p.force_config = opt.force_config;
    p.force_splits = opt.force_splits;
    p.force_stream_warps = opt.stream_warps;
    const gemm::GemmPlan plan = W8A16GemmPlan(p);
    auto launch = [&](int i) {
      set_copy(i % copies);
      Check(LaunchW8A16Gemm(p, g_stream), "LaunchW8A16Gemm");
    };
    const int per_batch = std::max(copies, 20);
    const double us_stream = TimePerLaunch(launch, per_batch);
    const double us = TimePerLaunchGraph(launch, per_batch);

    // Error on sampled outputs (copy 0).
    set_copy(0);
    Check(LaunchW8A16Gemm(p, g_stream), "LaunchW8A16Gemm");
    CheckCuda(cudaDeviceSynchronize(), "run");
    std::vector<uint16_t> hx(m * k), hy(m * n_total);
    CheckCuda(cudaMemcpy(hx.data(), x, hx.size() * 2, cudaMemcpyDeviceToHost), "x");
    CheckCuda(cudaMemcpy(hy.data(), y, hy.size() * 2, cudaMemcpyDeviceToHost), "y");
    double max_ref = 0, max_diff = 0;
    for (int r = 0; r < std::min<int64_t>(m, kSampleRows); ++r) {
      const int64_t row = (r * 7919) % m;
      for (int i = 0; i < kSampleCols; ++i) {
        double acc = 0;
        for (int64_t c = 0; c < k; ++c) acc += static_cast<double>(Bf16ToFloat(hx[row * k + c])) * wrow[i][c];
        const double got = Bf16ToFloat(hy[row * n_total + cols[i]]);
        max_ref = std::max(max_ref, std::fabs(acc));
        max_diff = std::max(max_diff, std::isfinite(got) ? std::fabs(got - acc) : INFINITY);
      }
    }
    const double flops = 2.0 * m * n_total * k;
    const std::string plan_name =
        W8A16GemmUsesStreamKernel(p)
            ? (opt.stream_warps > 0 ? "stream/w" + std::to_string(opt.stream_warps) : std::string("stream"))
            : PlanName(plan);
    Row row{shape.name, m, n_total, k, plan_name, us, flops / us * 1e-6, weight_bytes / us * 1e-3,
            100.0 * (weight_bytes / (g_copy_gbs * 1e3)) / us, max_diff / std::max(max_ref, 1e-30), us_stream};
    Emit(row);
    if (m >= 1024) {
      // The peer at prefill sizes: cuBLAS bf16 on the same shape, random
      // bf16 weights (bench/common/cublas_peer.h).
      static cublasHandle_t cublas = [] {
        cublasHandle_t h = nullptr;
        if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return static_cast<cublasHandle_t>(nullptr);
        cublasSetStream(h, g_stream);
        return h;
      }();
      if (cublas != nullptr) {
        __nv_bfloat16* wb = DeviceAlloc<__nv_bfloat16>(n_total * k);
        FillBf16<<<1024, 256>>>(wb, n_total * k, 4000);
        CheckCuda(cudaDeviceSynchronize(), "fill cublas weights");
        bool ok = true;
        const double cublas_us = TimePerLaunchGraph(
            [&](int) { ok &= bench::CublasBf16Gemm(cublas, m, n_total, k, wb, x, y) == CUBLAS_STATUS_SUCCESS; }, 20);
        if (ok) {
          std::printf("  cublas bf16   %-12s M=%-5lld %9.2f us %7.1f TFLOP/s; ours / cuBLAS %.2fx\n", shape.name,
                      static_cast<long long>(m), cublas_us, flops / cublas_us * 1e-6, us / cublas_us);
        }
        cudaFree(wb);
      }
    }

    if (opt.sweep) {
      // Every (configuration, split) at decode sizes; prefill: 64/128-token
      // tiles without split.
      std::string best, all;
      double best_us = 1e30;
      for (int cfg = 0; cfg < gemm::kNumTileConfigs; ++cfg) {
        const gemm::TileConfig& tc = gemm::GetTileConfig(static_cast<gemm::TileConfigId>(cfg));
        if (m > 256 && tc.block_tokens < 64) continue;
        for (int splits : {1, 2, 3, 4, 6, 8, 12, 16}) {
          if (m > 256 && splits > 1) break;
          W8A16GemmParams q = p;
          q.force_config = cfg;
          q.force_splits = splits;
          if (!W8A16GemmSupported(q)) continue;
          const gemm::GemmPlan qp = W8A16GemmPlan(q);
          if (qp.splits != splits || qp.workspace_bytes > ws_bytes) continue;
          const double t = TimePerLaunchGraph(
              [&](int i) {
                set_copy(i % copies);
                for (int s = 0; s < p.num_segments; ++s) q.segments[s] = p.segments[s];
                Check(LaunchW8A16Gemm(q, g_stream), "sweep");
              },
              per_batch, 3, 1);
          if (t < best_us) {
            best_us = t;
            best = PlanName(qp);
          }
          char buf[64];
          std::snprintf(buf, sizeof(buf), " %s:%.1f", PlanName(qp).c_str(), t);
          all += buf;
        }
      }
      std::printf("  sweep %-12s M=%-5lld best %-10s %9.2f us (heuristic %s %9.2f us, %.2fx)\n", shape.name,
                  static_cast<long long>(m), best.c_str(), best_us, PlanName(plan).c_str(), us, us / best_us);
      std::printf("  sweepall %s M=%lld%s\n", shape.name, static_cast<long long>(m), all.c_str());
    }
    cudaFree(x);
    cudaFree(y);
  }
  for (auto& s : segs) {
    for (auto* w : s.w) cudaFree(w);
    for (auto* sc : s.s) cudaFree(sc);
  }
}

// ---- MoE: 256 experts, top-8, hidden 6144, moe_intermediate 2048 ---------
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
    FillBf16<<<256, 256>>>(router_w, route.num_experts * hidden, 24);
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
    FillE4m3<<<4096, 256>>>(gate, E * gu_stride, 11);
    FillE4m3<<<4096, 256>>>(up, E * gu_stride, 12);
    FillE4m3<<<4096, 256>>>(down, E * d_stride, 13);
    FillScales<<<256, 256>>>(sg, E * gu_sstride, 14);
    FillScales<<<256, 256>>>(su, E * gu_sstride, 15);
    FillScales<<<256, 256>>>(sd, E * d_sstride, 16);
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
  FillBf16<<<1024, 256>>>(x, tokens * H, 21);
  FillF32<<<256, 256>>>(logits, tokens * E, 22, 3.0f);
  // A small correction bias: with random logits a large one would route
  // every token to the same few experts.
  FillF32<<<1, 256>>>(bias, E, 23, 0.001f);
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
  int hit = 0;
  for (int e = 0; e < E; ++e) hit += off[e + 1] > off[e];
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
      for (int64_t j = 0; j < kk; ++j) f[i * kk + j] = E4m3Host(raw[i * kk + j]) * sc[(i / 128) * (kk / 128) + j / 128];
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

int Main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") opt.quick = true;
    else if (a == "--sweep") opt.sweep = true;
    else if (a == "--no-moe") opt.moe = false;
    else if (a == "--csv" && i + 1 < argc) opt.csv = argv[++i];
    else if (a == "--probe") opt.probe = true;
    else if (a == "--tiled" && i + 1 < argc) {
      const std::string order = argv[++i];
      if (order != "along-k" && order != "across-rows") {
        std::fprintf(stderr, "--tiled: '%s' is not along-k or across-rows\n", order.c_str());
        return 2;
      }
      opt.layout = order == "along-k" ? GemmWeightLayout::kTilesAlongK : GemmWeightLayout::kTilesAcrossRows;
    }
    else if (a == "--shapes" && i + 1 < argc) opt.shapes = argv[++i];
    else if (a == "--ms" && i + 1 < argc) opt.ms = ParseList(argv[++i]);
    else if (a == "--moe-tokens" && i + 1 < argc) opt.moe_tokens = ParseList(argv[++i]);
    else if (a == "--stream-warps" && i + 1 < argc) {
      // Refused before any device work: a typo must not run a whole sweep
      // with the plan's width (atoi's 0) or stop halfway on a launcher error.
      const char* text = argv[++i];
      char* end = nullptr;
      const long w = std::strtol(text, &end, 10);
      if (end == text || *end != '\0' || !gemm::ValidForcedStreamWarps(static_cast<int>(w)) || w != static_cast<int>(w)) {
        std::fprintf(stderr, "--stream-warps: '%s' is not -1, 0, 1, 2, 4 or 8\n", text);
        return 2;
      }
      opt.stream_warps = static_cast<int>(w);
    }
    else if (a == "--moe-tail" && i + 1 < argc) {  // ROWS[,CONFIG NAME]
      const std::string v = argv[++i];
      const size_t comma = v.find(',');
      opt.tail_rows = std::atoi(v.substr(0, comma).c_str());
      opt.tail_config = comma == std::string::npos ? -1 : gemm::FindTileConfig(v.substr(comma + 1).c_str());
      if (comma != std::string::npos && opt.tail_config < 0) {
        std::fprintf(stderr, "--moe-tail: '%s' names no tile configuration\n", v.c_str());
        return 2;
      }
    }
    else if (a == "--force" && i + 1 < argc) {  // CONFIG,SPLITS (configuration index, split or blocks per SM)
      const std::vector<int64_t> f = ParseList(argv[++i]);
      opt.force_config = f.empty() ? -1 : static_cast<int>(f[0]);
      opt.force_splits = f.size() > 1 ? static_cast<int>(f[1]) : 1;
    }
  }
  const int sms = CurrentDeviceInfo().sm_count;
  CheckCuda(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking), "stream");
  g_copy_gbs = bench::MeasureCopyBandwidthGBs();
  std::printf("device %s, %d SMs, copy bandwidth %.0f GB/s (read + write), running sm80 code\n",
              bench::DeviceName().c_str(), sms, g_copy_gbs);
  if (!opt.csv.empty()) {
    g_csv = std::fopen(opt.csv.c_str(), "w");
    if (g_csv == nullptr) {
      std::fprintf(stderr, "cannot write %s\n", opt.csv.c_str());
      return 1;
    }
    std::fprintf(g_csv, "name,m,n,k,plan,us,tflops,gbs,roof_pct,max_err,copy_gbs,us_stream\n");
    std::fflush(g_csv);
  }

  g_layout = opt.layout;
  const size_t ws_bytes = size_t{64} << 20;
  void* ws = DeviceAlloc<uint8_t>(ws_bytes);
  CheckCuda(cudaMemset(ws, 0, ws_bytes), "ws");

  const std::vector<Shape> shapes = {
      {"mlp_gate_up", 6144, {{12288, true}}},
      {"mlp_down", 12288, {{6144, true}}},
      {"q_b", 2048, {{16384, true}}},
      {"kv_b", 512, {{28672, true}}},
      {"o_proj", 16384, {{6144, true}}},
      {"exp_gate_up", 6144, {{4096, true}}},
      {"exp_down", 2048, {{6144, true}}},
      {"fused_a", 6144, {{2048, true}, {576, true}, {128, true}, {32, false}}},
  };
  std::vector<int64_t> ms = opt.quick ? std::vector<int64_t>{1, 64} : std::vector<int64_t>{1, 16, 64, 256, 2048};
  if (!opt.ms.empty()) ms = opt.ms;
  if (opt.probe) bench::RunMemoryProbes(sms, g_stream, g_copy_gbs);
  for (const Shape& s : shapes) {
    if (!opt.shapes.empty() && ("," + opt.shapes + ",").find("," + std::string(s.name) + ",") == std::string::npos) {
      continue;
    }
    BenchDense(s, ms, opt, ws, ws_bytes);
  }
  if (opt.moe) {
    std::vector<int64_t> moe_tokens = opt.quick ? std::vector<int64_t>{64} : std::vector<int64_t>{64, 4096};
    if (!opt.moe_tokens.empty()) moe_tokens = opt.moe_tokens;
    for (int64_t t : moe_tokens) BenchMoe(t, ws, ws_bytes, opt);
  }
  if (g_csv != nullptr) std::fclose(g_csv);
  return 0;
}

}  // namespace
}  // namespace spar

int main(int argc, char** argv) { return spar::Main(argc, argv); }
