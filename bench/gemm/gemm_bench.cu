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
//   gemm_bench --moe-bias 1.5        # uneven routing: the selection bias uniform in [-1.5, 1.5) (default 0.001)
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
#include <string>
#include <vector>

#include "base/numeric.h"
#include "bench/common/bench_util.h"
#include "bench/common/cublas_peer.h"
#include "bench/gemm/gemm_bench_common.h"
#include "bench/gemm/memory_probes.h"
#include "kernels/cuda/common/device_info.h"
#include "kernels/cuda/gemm/gemm_config.h"
#include "kernels/cuda/gemm/w8a16_gemm.h"
#include "kernels/cuda/gemm/w8a16_tiles.h"

namespace spar::gemm_bench {
namespace {

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
        FillE4m3(w, bytes, 1000 + si);  // same values in every copy
        float* sc = DeviceAlloc<float>(nscale);
        FillScales(sc, nscale, 2000 + si);
        segs[si].s.push_back(sc);
      } else {
        FillBf16(reinterpret_cast<__nv_bfloat16*>(w), bytes / 2, 3000 + si);
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
      for (int64_t c = 0; c < k; ++c) wrow[i][c] = E4m3ToFloat(raw[c]) * srow[c / 128];
    } else {
      for (int64_t c = 0; c < k; ++c) wrow[i][c] = Bf16ToFloat(static_cast<uint16_t>(raw[2 * c] | (raw[2 * c + 1] << 8)));
    }
  }

  for (int64_t m : ms) {
    __nv_bfloat16* x = DeviceAlloc<__nv_bfloat16>(m * k);
    __nv_bfloat16* y = DeviceAlloc<__nv_bfloat16>(m * n_total);
    FillBf16(x, m * k, 77 + m);
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
        FillBf16(wb, n_total * k, 4000);
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
    else if (a == "--moe-bias" && i + 1 < argc) {  // the routing bias's range (uneven routing)
      double b = 0;
      if (!bench::ParseMoeBias(argv[++i], &b)) return 2;
      opt.moe_bias = static_cast<float>(b);
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
}  // namespace spar::gemm_bench

int main(int argc, char** argv) { return spar::gemm_bench::Main(argc, argv); }
