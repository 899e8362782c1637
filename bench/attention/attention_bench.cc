// Sparse MLA decode / prefill and the per-layer small ops on the GPU.
//
//   attention_bench [peer.json] [--decode-only | --absorb-only | --prefill-only] [--batches 1,64]
//                   [--heads 8,64] [--prefill-heads 64,128]
//
// --decode-only skips prefill and the small ops; --absorb-only runs only the
// MLA absorptions; --prefill-only only the prefill table; --batches /
// --heads / --prefill-heads replace the grids' lists (positive integers,
// comma-separated).
//
// Decode: batch {1, 16, 64, 128} x heads {8, 16, 64, 128} x topk 2048 over a
// 1M-row latent cache (bf16 and FP8), random slots, 8 index sets rotated so
// repeated runs do not re-read the same rows from L2. Prefill: 4096 tokens x
// {64, 128} heads over a 64K-row context. Prints µs (median of CUDA-event
// timings after warm-up; split-K merge included; decode also as CUDA-graph
// replays of 20 launches, without the host launch latency), TFLOP/s
// (2·B·H·topk·(576+512)), GB/s of gathered rows, % of the device copy
// bandwidth measured in the same run, and the PyTorch fallback's time from
// peer.json (bench/attention/peer_attention.py, same call) with the ratio.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "base/numeric.h"
#include "base/rng.h"
#include "bench/common/bench_util.h"
#include "kernels/cuda/attention/absorb_gemm.h"
#include "kernels/cuda/attention/latent_widen.h"
#include "kernels/cuda/attention/mla_cache.h"
#include "kernels/cuda/sampling/sampling.h"
#include "kernels/cuda/small_ops/small_ops.h"
#include "kernels/cuda/attention/sparse_mla.h"
#include "kernels/ref/cache_ref.h"
#include "nlohmann/json.hpp"

namespace spar::bench {
namespace {

constexpr int kTopk = 2048;

void Check(const absl::Status& st, const char* what) {
  if (!st.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, st.ToString().c_str());
    std::exit(1);
  }
}

template <typename T>
T* DeviceUpload(const std::vector<T>& h) {
  T* d = nullptr;
  CheckCuda(cudaMalloc(&d, h.size() * sizeof(T)), "malloc");
  CheckCuda(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  return d;
}

std::vector<uint16_t> RandomBf16(size_t n, uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = FloatToBf16(scale * rng.Symmetric());
  return v;
}

// A latent cache of `rows` slots: 16384 random encoded rows tiled.
uint8_t* MakeCache(LatentFormat f, int64_t rows) {
  const size_t rb = LatentRowBytes(f);
  const int64_t pattern = 16384;
  std::vector<uint8_t> host(pattern * rb);
  Rng rng(1);
  std::vector<float> row(576);
  for (int64_t s = 0; s < pattern; ++s) {
    for (auto& v : row) v = rng.Symmetric();
    ref::EncodeLatentRow(f, row.data(), host.data() + s * rb);
  }
  uint8_t* d = nullptr;
  CheckCuda(cudaMalloc(&d, rows * rb), "malloc cache");
  CheckCuda(cudaMemcpy(d, host.data(), host.size(), cudaMemcpyHostToDevice), "upload");
  for (int64_t s = pattern; s < rows; s += pattern) {
    const int64_t n = std::min(pattern, rows - s);
    CheckCuda(cudaMemcpy(d + s * rb, d, n * rb, cudaMemcpyDeviceToDevice), "tile");
  }
  return d;
}

struct MlaResult {
  double us, tflops, gbs;
  double graph_us = 0;  // per launch, replayed from a CUDA graph (decode only)
  SparseMlaPlan plan;
};

// widen: FP8 rows widened first (latent_widen.h, the engine's prefill path):
// the first index_range rows as one sequence's context, widened and the
// lists remapped inside the timed launch, then the bf16 kernel.
// head_tile > 0: that head tile instead of the planner's, split as the
// planner would split it (PlanSparseMlaSplits).
MlaResult TimeMla(LatentFormat f, const uint8_t* cache, int64_t cache_rows, int64_t tokens, int heads,
                  int64_t index_range, bool widen = false, int head_tile = 0) {
  // Enough index sets that the rotation's gathered rows exceed the L2 cache
  // (batch 1 gathers only 2.4 MB per set).
  const int sets = tokens >= 1024 ? 2 : tokens <= 4 ? 64 : 8;
  std::vector<int32_t*> idx(sets);
  for (int s = 0; s < sets; ++s) {
    Rng rng(100 + s + tokens * 7 + heads);
    std::vector<int32_t> h(tokens * kTopk);
    for (auto& v : h) v = static_cast<int32_t>(rng.Below(index_range));
    idx[s] = DeviceUpload(h);
  }
  __nv_bfloat16* q = reinterpret_cast<__nv_bfloat16*>(DeviceUpload(RandomBf16(tokens * heads * 576, 5, 2.0f)));
  __nv_bfloat16* out = nullptr;
  float* lse = nullptr;
  CheckCuda(cudaMalloc(&out, tokens * heads * 512 * 2), "malloc");
  CheckCuda(cudaMalloc(&lse, tokens * heads * 4), "malloc");
  SparseMlaParams p;
  p.q = q;
  p.tokens = tokens;
  p.heads = heads;
  p.q_head_stride = 576;
  p.q_token_stride = static_cast<int64_t>(heads) * 576;
  p.format = f;
  p.cache = cache;
  p.num_slots = cache_rows;
  p.indices_stride = kTopk;
  p.list_len = kTopk;
  p.scale = 0.0625f;
  p.out = out;
  p.out_head_stride = 512;
  p.out_token_stride = static_cast<int64_t>(heads) * 512;
  p.lse = lse;
  const int64_t ctx_blocks = index_range / 64;
  int32_t *table = nullptr, *base = nullptr, *block_map = nullptr, *lists = nullptr;
  __nv_bfloat16* wide = nullptr;
  LatentWidenParams w;
  SlotRemapParams m;
  if (widen) {
    std::vector<int32_t> t(ctx_blocks);
    for (int64_t b = 0; b < ctx_blocks; ++b) t[b] = static_cast<int32_t>(b);
    table = DeviceUpload(t);
    base = DeviceUpload(std::vector<int32_t>{0, static_cast<int32_t>(ctx_blocks)});
    CheckCuda(cudaMalloc(&block_map, cache_rows / 64 * 4), "malloc map");
    CheckCuda(cudaMalloc(&lists, tokens * kTopk * 4), "malloc lists");
    CheckCuda(cudaMalloc(&wide, WidenedLatentBytes(ctx_blocks)), "malloc widened");
    w.cache = cache;
    w.num_slots = cache_rows;
    w.block_table = table;
    w.block_table_stride = ctx_blocks;
    w.num_seqs = 1;
    w.seq_block_base = base;
    w.max_seq_blocks = ctx_blocks;
    w.widened = wide;
    w.block_map = block_map;
    m.tokens = tokens;
    m.list_len = kTopk;
    m.in_stride = m.out_stride = kTopk;
    m.block_map = block_map;
    m.num_slots = cache_rows;
    m.out = lists;
    p.format = LatentFormat::kBF16;
    p.cache = reinterpret_cast<const uint8_t*>(wide);
    p.num_slots = ctx_blocks * 64;
  }
  Check(PlanSparseMlaForDevice(tokens, heads, kTopk, p.format, &p.plan, head_tile), "plan");
  const size_t ws = SparseMlaWorkspaceBytes(p.plan, tokens, heads);
  void* wsp = nullptr;
  if (ws > 0) CheckCuda(cudaMalloc(&wsp, ws), "malloc ws");
  p.workspace = wsp;
  p.workspace_bytes = ws;
  int s = 0;
  const double us = MedianMicros(
      [&] {
        p.indices = idx[s];
        s = (s + 1) % sets;
        if (widen) {
          m.indices = p.indices;
          Check(LaunchWidenLatentBlocks(w, nullptr), "widen");
          Check(LaunchRemapSlots(m, nullptr), "remap");
          p.indices = lists;
        }
        Check(LaunchSparseMla(p, nullptr), "sparse mla");
      },
      5, tokens >= 1024 ? 10 : 50);
  MlaResult r;
  if (tokens < 1024) {
    cudaStream_t stream;
    CheckCuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
    r.graph_us = GraphMedianMicros(
        [&](int i) {
          p.indices = idx[i % sets];
          Check(LaunchSparseMla(p, stream), "sparse mla");
        },
        stream);
    CheckCuda(cudaStreamDestroy(stream), "stream");
  }
  r.us = us;
  r.tflops = 2.0 * tokens * heads * kTopk * (576 + 512) / (us * 1e-6) / 1e12;
  r.gbs = static_cast<double>(tokens) * kTopk * LatentRowBytes(f) / (us * 1e-6) / 1e9;
  r.plan = p.plan;
  for (void* d : {static_cast<void*>(table), static_cast<void*>(base), static_cast<void*>(block_map),
                  static_cast<void*>(lists), static_cast<void*>(wide)}) {
    cudaFree(d);
  }
  for (auto* d : idx) cudaFree(d);
  cudaFree(q);
  cudaFree(out);
  cudaFree(lse);
  cudaFree(wsp);
  return r;
}

// The q absorption and output un-absorption (GLM-5 heads: Dn 192, Dv 256) at
// 64 heads (TP 1) and 8 (TP 8): the engine's choice (16-row tiles up to 16
// tokens) against the 64-row tile on the same arguments, as graph replays
// rotating over 8 copies of kv_b so the weights come from DRAM as in a
// decode step (4096 tokens: a prefill chunk, both at 64-row tiles). % copy:
// the weight bytes read.
void BenchAbsorb(double copy_gbs) {
  std::printf("\n## MLA absorptions, graph replays (weights from DRAM)\n");
  std::printf("| op | heads | tokens | engine us | 64-row tile us | ratio | %% copy BW (engine) |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  constexpr int kCopies = 8;
  const int nope = 192, v = 256;
  cudaStream_t stream;
  CheckCuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  for (int heads : {64, 8}) {
    std::vector<__nv_bfloat16*> kvb(kCopies);
    for (int c = 0; c < kCopies; ++c) {
      kvb[c] = reinterpret_cast<__nv_bfloat16*>(DeviceUpload(RandomBf16(static_cast<size_t>(heads) * (nope + v) * 512, 8 + c)));
    }
    for (int64_t tokens : {1, 2, 4, 8, 16, 64, 4096}) {  // 4096: a prefill chunk
      auto* q = reinterpret_cast<__nv_bfloat16*>(DeviceUpload(RandomBf16(tokens * heads * (nope + 64), 20)));
      auto* ol = reinterpret_cast<__nv_bfloat16*>(DeviceUpload(RandomBf16(tokens * heads * 512, 21)));
      __nv_bfloat16 *qo = nullptr, *o = nullptr;
      CheckCuda(cudaMalloc(&qo, tokens * heads * 576 * 2), "malloc");
      CheckCuda(cudaMalloc(&o, tokens * heads * v * 2), "malloc");
      // The engine's GEMM forced to the 64-row tile (kv_b copy c).
      auto wide_tile = [&](int c, bool query) {
        const MlaAbsorbWeights w{kvb[c], heads, nope, v};
        BatchedGemmParams p =
            query ? MlaQAbsorbGemm(w, q, tokens, nope + 64, qo, static_cast<int64_t>(heads) * 576, 576)
                  : MlaOutUnabsorbGemm(w, ol, tokens, static_cast<int64_t>(heads) * 512, 512, o);
        p.tile_rows = 64;
        return p;
      };
      for (bool query : {true, false}) {
        const double engine_us = GraphMedianMicros(
            [&](int i) {
              const MlaAbsorbWeights w{kvb[i % kCopies], heads, nope, v};
              if (query) {
                Check(LaunchMlaQAbsorb(w, q, tokens, nope + 64, qo, static_cast<int64_t>(heads) * 576, 576, stream),
                      "absorb");
              } else {
                Check(LaunchMlaOutUnabsorb(w, ol, tokens, static_cast<int64_t>(heads) * 512, 512, o, stream),
                      "unabsorb");
              }
            },
            stream);
        const double wide_us = GraphMedianMicros(
            [&](int i) { Check(LaunchBatchedGemm(wide_tile(i % kCopies, query), stream), "batched gemm"); }, stream);
        const double bytes = 2.0 * heads * (query ? nope : v) * 512;
        std::printf("| %s | %d | %lld | %.2f | %.2f | %.2fx | %.0f%% |\n", query ? "q absorption" : "un-absorption",
                    heads, static_cast<long long>(tokens), engine_us, wide_us, wide_us / engine_us,
                    100.0 * bytes / (engine_us * 1e-6) / 1e9 / copy_gbs);
      }
      cudaFree(q);
      cudaFree(ol);
      cudaFree(qo);
      cudaFree(o);
    }
    for (auto* d : kvb) cudaFree(d);
  }
  CheckCuda(cudaStreamDestroy(stream), "stream");
}

double PeerUs(const nlohmann::json& peer, const char* phase, const std::string& key) {
  if (!peer.contains(phase) || !peer[phase].contains(key)) return 0.0;
  return peer[phase][key].get<double>();
}

}  // namespace
}  // namespace spar::bench

int main(int argc, char** argv) {
  using namespace spar;
  using namespace spar::bench;
  nlohmann::json peer;
  bool decode_only = false, absorb_only = false, prefill_only = false;
  std::vector<int> batches = {1, 16, 64, 128}, head_counts = {8, 16, 64, 128}, prefill_heads = {64, 128};
  // "N,N,..." of positive integers, or empty on anything else.
  auto parse_list = [](const std::string& s) {
    std::vector<int> v;
    for (size_t at = 0; at <= s.size();) {
      const size_t end = std::min(s.find(',', at), s.size());
      int x = 0;
      if (!absl::SimpleAtoi(s.substr(at, end - at), &x) || x < 1) return std::vector<int>{};
      v.push_back(x);
      at = end + 1;
    }
    return v;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--decode-only") {
      decode_only = true;
    } else if (a == "--absorb-only") {
      absorb_only = true;
    } else if (a == "--prefill-only") {
      prefill_only = true;
    } else if ((a == "--batches" || a == "--heads" || a == "--prefill-heads") && i + 1 < argc) {
      std::vector<int> v = parse_list(argv[++i]);
      if (v.empty()) {
        std::fprintf(stderr, "%s wants positive integers N,N,..., got '%s'\n", a.c_str(), argv[i]);
        return 2;
      }
      (a == "--batches" ? batches : a == "--heads" ? head_counts : prefill_heads) = std::move(v);
    } else if (a[0] != '-') {
      std::ifstream in(a);
      if (in) in >> peer;
    } else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  const double copy_gbs = MeasureCopyBandwidthGBs();
  std::printf("device: %s (sm80 code), copy bandwidth %.0f GB/s (read+write)\n", DeviceName().c_str(), copy_gbs);
  if (absorb_only) {
    BenchAbsorb(copy_gbs);
    return 0;
  }

  const int64_t kRows = int64_t{1} << 20;
  uint8_t* cache_bf16 = MakeCache(LatentFormat::kBF16, kRows);
  uint8_t* cache_fp8 = MakeCache(LatentFormat::kFp8Ds, kRows);
  std::string summary;
  char line[512];

  if (prefill_only) batches.clear();
  std::printf("\n## sparse MLA decode, topk 2048, 1M-row cache\n");
  std::printf("| fmt | batch | heads | tile x splits | us | TFLOP/s | GB/s gathered | %% copy BW | torch us | speedup | "
              "graph-replay us | %% copy BW (graph) |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (auto f : {LatentFormat::kBF16, LatentFormat::kFp8Ds}) {
    const char* fn = f == LatentFormat::kBF16 ? "bf16" : "fp8";
    for (int batch : batches) {
      for (int heads : head_counts) {
        const MlaResult r = TimeMla(f, f == LatentFormat::kBF16 ? cache_bf16 : cache_fp8, kRows, batch, heads, kRows);
        const double peer_us = PeerUs(peer, "decode", std::string(fn) + "/" + std::to_string(batch) + "/" + std::to_string(heads));
        std::snprintf(line, sizeof(line),
                      "| %s | %d | %d | %dx%d | %.1f | %.1f | %.0f | %.0f%% | %.1f | %.1fx | %.1f | %.0f%% |\n", fn, batch,
                      heads, r.plan.head_tile, r.plan.num_splits, r.us, r.tflops, r.gbs, 100.0 * r.gbs / copy_gbs,
                      peer_us, peer_us > 0 ? peer_us / r.us : 0.0, r.graph_us,
                      100.0 * r.gbs * r.us / r.graph_us / copy_gbs);
        std::fputs(line, stdout);
        if ((batch == 64 && heads == 8) || (batch == 1 && heads == 64) || (batch >= 64 && heads >= 64)) summary += line;
        // FP8 rows at 32+ heads (TP 1 / 2) on the head tiles the planner
        // did not choose (the wide 32 / 64-head tile, the narrow kernel's 16
        // and 8): the evidence behind PlanSparseMla's cut between them.
        if (f == LatentFormat::kFp8Ds && heads > 16) {
          for (int tile : {heads <= 32 ? 32 : 64, 16, 8}) {
            if (tile == r.plan.head_tile) continue;
            const MlaResult n = TimeMla(f, cache_fp8, kRows, batch, heads, kRows, false, tile);
            std::snprintf(line, sizeof(line),
                          "| fp8 h%d | %d | %d | %dx%d | %.1f | %.1f | %.0f | %.0f%% | - | - | %.1f | %.0f%% |\n", tile,
                          batch, heads, n.plan.head_tile, n.plan.num_splits, n.us, n.tflops, n.gbs,
                          100.0 * n.gbs / copy_gbs, n.graph_us, 100.0 * n.gbs * n.us / n.graph_us / copy_gbs);
            std::fputs(line, stdout);
          }
        }
      }
    }
  }

  if (decode_only) {
    cudaFree(cache_bf16);
    cudaFree(cache_fp8);
    return 0;
  }
  // "fp8 widened": the engine's prefill path for FP8 rows at >= 32 heads
  // (the 64K-row context widened once per launch, lists remapped, bf16
  // kernel), timed whole; heads 8-32 show where the policy's cut lies.
  std::printf("\n## sparse MLA prefill, 4096 tokens, topk 2048 over a 64K-token context\n");
  std::printf("| fmt | tokens | heads | tile x splits | us | TFLOP/s | GB/s gathered | %% copy BW | torch us | speedup |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (int variant : {0, 1, 2}) {
    const LatentFormat f = variant == 0 ? LatentFormat::kBF16 : LatentFormat::kFp8Ds;
    const char* fn = variant == 0 ? "bf16" : variant == 1 ? "fp8" : "fp8 widened";
    for (int heads : prefill_heads) {
      const MlaResult r =
          TimeMla(f, f == LatentFormat::kBF16 ? cache_bf16 : cache_fp8, kRows, 4096, heads, 65536, variant == 2);
      const double peer_us = f == LatentFormat::kBF16 ? PeerUs(peer, "prefill", "bf16/4096/" + std::to_string(heads)) : 0.0;
      std::snprintf(line, sizeof(line), "| %s | 4096 | %d | %dx%d | %.0f | %.1f | %.0f | %.0f%% | %.0f | %.1fx |\n", fn, heads,
                    r.plan.head_tile, r.plan.num_splits, r.us, r.tflops, r.gbs, 100.0 * r.gbs / copy_gbs, peer_us,
                    peer_us > 0 ? peer_us / r.us : 0.0);
      std::fputs(line, stdout);
      summary += line;
    }
  }

  if (prefill_only) {
    std::printf("\n## summary\n%s", summary.c_str());
    cudaFree(cache_bf16);
    cudaFree(cache_fp8);
    return 0;
  }
  BenchAbsorb(copy_gbs);
  // Small ops at decode and prefill sizes (GLM-5 shapes).
  std::printf("\n## small ops\n| op | shape | us | GB/s |\n|---|---|---|---|\n");
  {
    for (int64_t tokens : {64, 4096}) {
      const int64_t dim = 6144;
      auto* x = reinterpret_cast<__nv_bfloat16*>(DeviceUpload(RandomBf16(tokens * dim, 2)));
      auto* res = reinterpret_cast<__nv_bfloat16*>(DeviceUpload(RandomBf16(tokens * dim, 3)));
      auto* w = reinterpret_cast<__nv_bfloat16*>(DeviceUpload(RandomBf16(dim, 4)));
      __nv_bfloat16* out = nullptr;
      CheckCuda(cudaMalloc(&out, tokens * dim * 2), "malloc");
      RmsNormParams p;
      p.x = x;
      p.x_stride = dim;
      p.residual = res;
      p.residual_stride = dim;
      p.weight = w;
      p.out = out;
      p.out_stride = dim;
      p.rows = tokens;
      p.dim = static_cast<int>(dim);
      const double us = MedianMicros([&] { Check(LaunchRmsNorm(p, nullptr), "rmsnorm"); });
      std::printf("| rmsnorm+residual | %lld x 6144 | %.1f | %.0f |\n", static_cast<long long>(tokens), us,
                  4.0 * tokens * dim * 2 / (us * 1e-6) / 1e9);
      cudaFree(x);
      cudaFree(res);
      cudaFree(w);
      cudaFree(out);
    }
    for (auto f : {LatentFormat::kBF16, LatentFormat::kFp8Ds}) {
      for (int64_t tokens : {64, 4096}) {
        auto* kv = reinterpret_cast<__nv_bfloat16*>(DeviceUpload(RandomBf16(tokens * 576, 6)));
        auto* w = reinterpret_cast<__nv_bfloat16*>(DeviceUpload(RandomBf16(512, 7)));
        std::vector<int32_t> pos(tokens), slots(tokens);
        for (int64_t t = 0; t < tokens; ++t) {
          pos[t] = static_cast<int32_t>(t);
          slots[t] = static_cast<int32_t>((t * 7919) % kRows);
        }
        int32_t* dpos = DeviceUpload(pos);
        int32_t* dslots = DeviceUpload(slots);
        std::vector<float> inv(32);
        for (int i = 0; i < 32; ++i) inv[i] = std::pow(1e6f, -i / 32.0f);
        float* dinv = DeviceUpload(inv);
        MlaCacheWriteParams p;
        p.kv = kv;
        p.tokens = tokens;
        p.kv_stride = 576;
        p.norm_weight = w;
        p.positions = dpos;
        p.inv_freq = dinv;
        p.slot_mapping = dslots;
        p.format = f;
        p.cache = f == LatentFormat::kBF16 ? cache_bf16 : cache_fp8;
        p.num_slots = kRows;
        const double us = MedianMicros([&] { Check(LaunchMlaCacheWrite(p, nullptr), "cache write"); });
        std::printf("| mla cache write %s | %lld tokens | %.1f | %.0f |\n", f == LatentFormat::kBF16 ? "bf16" : "fp8",
                    static_cast<long long>(tokens), us,
                    tokens * (1152.0 + LatentRowBytes(f)) / (us * 1e-6) / 1e9);
        cudaFree(kv);
        cudaFree(w);
        cudaFree(dpos);
        cudaFree(dslots);
        cudaFree(dinv);
      }
    }
    for (int rows : {1, 64}) {
      for (int mode = 0; mode < 2; ++mode) {
        const int vocab = 154880;
        std::vector<float> logits(static_cast<size_t>(rows) * vocab);
        Rng rng(11);
        for (auto& l : logits) {
          float g = 0;
          for (int k = 0; k < 12; ++k) g += rng.Uniform();
          l = 3.0f * (g - 6.0f);
        }
        float* dl = DeviceUpload(logits);
        std::vector<SamplingRowParams> sp(rows);
        for (int r = 0; r < rows; ++r) {
          sp[r].sampling.temperature = mode == 0 ? 0.0f : 0.8f;
          sp[r].sampling.top_p = mode == 0 ? 1.0f : 0.9f;
          sp[r].sampling.top_k = mode == 0 ? 0 : 50;
          sp[r].sampling.seed = r;
        }
        SamplingRowParams* dsp = DeviceUpload(sp);
        void* ws = nullptr;
        CheckCuda(cudaMalloc(&ws, SampleWorkspaceBytes(rows, vocab)), "malloc");
        int32_t* tok = nullptr;
        CheckCuda(cudaMalloc(&tok, rows * 4), "malloc");
        SampleParams p;
        p.logits = dl;
        p.logits_stride = vocab;
        p.rows = rows;
        p.vocab = vocab;
        p.params = dsp;
        p.workspace = ws;
        p.workspace_bytes = SampleWorkspaceBytes(rows, vocab);
        p.tokens = tok;
        const double us = MedianMicros([&] { Check(LaunchSample(p, nullptr), "sample"); }, 3, 20);
        std::printf("| sampling %s | %d x 154880 | %.1f | %.0f |\n", mode == 0 ? "greedy" : "T0.8 top-k 50 top-p 0.9", rows,
                    us, 4.0 * rows * vocab / (us * 1e-6) / 1e9);
        cudaFree(dl);
        cudaFree(dsp);
        cudaFree(ws);
        cudaFree(tok);
      }
    }
  }

  std::printf("\n## summary (targets: bf16 b64 h8 <= 51 us, fp8 b64 h8 <= 30 us, b1 h64 <= 15 us, "
              ">= 230 TFLOP/s at 64 heads, >= 300 at 128 heads and prefill, >= 3x torch)\n");
  std::printf("| fmt | batch | heads | tile x splits | us | TFLOP/s | GB/s gathered | %% copy BW | torch us | speedup |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  std::fputs(summary.c_str(), stdout);
  cudaFree(cache_bf16);
  cudaFree(cache_fp8);
  return 0;
}
