// W4A16 GEMM benchmark (issue 24's targets), int4 (group 128) and NVFP4:
//   * decode GEMMs at M in {1, 4, 8, 16} on GLM-5 shapes: % of the copy
//     roofline over the packed weight + scale (+ zero) bytes (target >= 80 %);
//   * the grouped MoE GEMMs of one layer at 64 tokens x top-8 over 256
//     experts (gate/up as SiLU pairs, then down): % of the copy roofline over
//     the bytes of the experts hit (target >= 70 %);
//   * M = 2048 against cuBLAS bf16 on the same shape (target <= 1.8x).
// Times: median µs per launch of back-to-back launches replayed from a CUDA
// graph, the weights rotated over enough copies to exceed L2 (every launch
// reads its weights from DRAM, as in serving). Correctness is the GPU
// tests' job; this prints a sampled max error against the fp32 reference
// only as a sanity check.
//
// Activations are random bf16 (never zeros: they hide unwritten outputs
// and can run faster than real data).
//
// Usage: w4a16_bench [--csv FILE] [--quick] [--sweep] [--moe-tokens 1,8,64] [--moe-bias RANGE]
//                    [--shapes a,b] [--formats int4,nvfp4] [--ms 1,4] [--force NAME] [--probe]
//   --sweep: also every tile configuration, forced, at M <= 16 (the
//   planner's split for each) and for the grouped GEMMs, to fit the
//   configuration choice; --force NAME: only that configuration (for a
//   profiler run of one kernel); --probe: also the streaming kernel's weight
//   reads without its arithmetic (w4_stream_probe.cu); --moe-bias RANGE:
//   route the MoE tokens unevenly, as gemm_bench --moe-bias does (RouteTokens).
#include "kernels/cuda/common/arch.cuh"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "base/numeric.h"
#include "base/rng.h"
#include "bench/common/bench_util.h"
#include "bench/common/cublas_peer.h"
#include "bench/gemm/w4_stream_probe.h"
#include "kernels/cuda/gemm/moe.h"
#include "kernels/cuda/gemm/w4_layout.h"
#include "kernels/cuda/gemm/w4a16_gemm.h"

namespace spar {
namespace {

using bench::CheckCuda;

// A random 4-bit matrix, packed, in `copies` device copies.
struct Packed {
  gemm::W4Packed host;
  std::vector<void*> values, scales, zeros, fp4, global;
  int64_t bytes = 0;  // what one launch reads: values + scales (+ zeros)
  ~Packed() {
    for (auto* v : {&values, &scales, &zeros, &fp4, &global}) {
      for (void* p : *v) cudaFree(p);
    }
  }
  W4GemmWeight View(int copy) const {
    W4GemmWeight w;
    w.type = host.fp4 ? W4WeightType::kNvfp4 : W4WeightType::kInt4;
    w.values = static_cast<const uint8_t*>(values[copy]);
    w.rows_padded = host.rows_padded;
    w.n = host.rows;
    if (host.fp4) {
      w.fp4_scales = static_cast<const uint8_t*>(fp4[copy]);
      w.global_scale = static_cast<const float*>(global[copy]);
    } else {
      w.scales = static_cast<const float*>(scales[copy]);
      w.zeros = static_cast<const uint8_t*>(zeros[copy]);
      w.group = host.group;
    }
    return w;
  }
};

void* Upload(const void* src, size_t bytes) {
  void* p = nullptr;
  CheckCuda(cudaMalloc(&p, std::max<size_t>(bytes, 16)), "malloc");
  CheckCuda(cudaMemcpy(p, src, bytes, cudaMemcpyHostToDevice), "upload");
  return p;
}

gemm::W4Packed RandomPacked(bool fp4, int64_t n, int64_t k, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint8_t> codes(n * k), zeros(n * (k / 128)), fp4s(n * (k / 16));
  std::vector<float> scales(n * (k / 128));
  for (auto& c : codes) c = static_cast<uint8_t>(rng.Below(16));
  for (auto& z : zeros) z = static_cast<uint8_t>(rng.Below(16));
  for (auto& s : scales) s = 0.01f * (0.5f + rng.Uniform());
  for (auto& s : fp4s) s = static_cast<uint8_t>(0x30 + rng.Below(8));
  gemm::W4Source src;
  src.rows = n;
  src.cols = k;
  src.fp4 = fp4;
  src.group = 128;
  src.codes = codes.data();
  src.zeros = zeros.data();
  src.scales = scales.data();
  src.fp4_scales = fp4s.data();
  src.global_scale = 0.02f;
  return gemm::PackW4(src);
}

void Replicate(Packed& p, int copies) {
  const gemm::W4Packed& h = p.host;
  const float global[2] = {h.global_scale, h.global_scale_up};
  for (int c = 0; c < copies; ++c) {
    p.values.push_back(Upload(h.values.data(), h.values.size()));
    if (h.fp4) {
      p.fp4.push_back(Upload(h.fp4_scales.data(), h.fp4_scales.size()));
      p.global.push_back(Upload(global, sizeof(global)));
    } else {
      p.scales.push_back(Upload(h.scales.data(), h.scales.size() * 4));
      p.zeros.push_back(Upload(h.zeros.data(), h.zeros.size()));
    }
  }
  p.bytes = static_cast<int64_t>(h.values.size() + (h.fp4 ? h.fp4_scales.size() : h.scales.size() * 4 + h.zeros.size()));
}

struct Shape {
  const char* name;
  int64_t n, k;
};

// Per rank at TP 8 (attention and dense MLP), one expert (MoE), and the
// whole 12288 x 6144 dense gate for a TP 1 reference point.
constexpr Shape kShapes[] = {
    {"q_a", 2048, 6144},          {"kv_a", 576, 6144},              {"q_b_tp8", 2048, 2048},
    {"o_proj_tp8", 6144, 2048},
    {"expert_gate_up", 4096, 6144}, {"expert_down", 6144, 2048},      {"dense_gate_tp1", 12288, 6144},
};

FILE* g_csv = nullptr;
int g_force = -1;  // --force NAME: only this configuration (dense and grouped)
double g_moe_bias = -1;  // --moe-bias RANGE; < 0: even routing (RouteTokens)
int g_tail_rows = -1;    // --moe-tail ROWS[,NAME]: the grouped GEMMs' tail split (w4a16_gemm.h)
int g_tail_config = -1;

void Report(const char* kind, const char* fmt, const char* shape, int64_t m, double us, int64_t bytes, double copy_gbs,
            double extra) {
  const double gbs = bytes / (us * 1e-6) / 1e9;
  std::printf("%-8s %-6s %-16s M=%-5lld %9.2f us  %8.1f GB/s  %5.1f%% of copy  %s%.3f\n", kind, fmt, shape,
              static_cast<long long>(m), us, gbs, 100.0 * gbs / copy_gbs, extra >= 0 ? "x cuBLAS " : "", extra >= 0 ? extra : 0);
  if (g_csv) {
    std::fprintf(g_csv, "%s,%s,%s,%lld,%.3f,%lld,%.1f,%.2f,%.3f\n", kind, fmt, shape, static_cast<long long>(m), us,
                 static_cast<long long>(bytes), gbs, 100.0 * gbs / copy_gbs, extra);
  }
}

// Random bf16 activations in [-1, 1).
void* RandomActivations(int64_t count, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint16_t> h(static_cast<size_t>(count));
  for (auto& v : h) v = FloatToBf16(static_cast<float>(rng.Uniform() * 2.0 - 1.0));
  return Upload(h.data(), h.size() * 2);
}

void RunDense(bool fp4, const Shape& s, const std::vector<int64_t>& ms, double copy_gbs, cudaStream_t stream,
              void* ws, size_t ws_bytes, cublasHandle_t cublas, bool sweep) {
  Packed p;
  p.host = RandomPacked(fp4, s.n, s.k, s.n * 7 + s.k);
  const int copies = static_cast<int>(std::max<int64_t>(2, (int64_t{512} << 20) / (s.n * s.k / 2) + 1));
  Replicate(p, copies);
  const int64_t max_m = *std::max_element(ms.begin(), ms.end());
  void* x = RandomActivations(max_m * s.k, s.n + s.k);
  void* y = nullptr;
  CheckCuda(cudaMalloc(&y, max_m * s.n * 4), "malloc");
  for (int64_t m : ms) {
    // (--force NAME times that configuration at any M.)
    const int forced_last = sweep && (m <= 16 || g_force >= 0) ? kW4NumConfigs - 1 : -1;
    // forced -1: the planner's plan; >= 0: that configuration (--sweep, --force).
    auto launch_with = [&](int forced) {
      return [&, forced](int i) {
        W4A16GemmParams prm;
        prm.m = m;
        prm.k = s.k;
        prm.x = static_cast<const __nv_bfloat16*>(x);
        prm.ldx = s.k;
        prm.w = p.View(i % copies);
        prm.y = y;
        prm.ldy = s.n;
        prm.workspace = ws;
        prm.workspace_bytes = ws_bytes;
        prm.force_config = forced;
        prm.force_splits = 0;
        const absl::Status st = LaunchW4A16Gemm(prm, stream);
        if (!st.ok()) {
          std::fprintf(stderr, "launch: %s\n", std::string(st.message()).c_str());
          std::exit(1);
        }
      };
    };
    for (int forced = 0; forced <= forced_last; ++forced) {
      if (g_force >= 0 && forced != g_force) continue;
      if (!W4ConfigTiles(forced, p.host.rows_padded)) continue;  // (W4P128T on kv_a's 576 rows)
      const double us = bench::GraphMedianMicros(launch_with(forced), stream, 20, 9);
      char label[64];
      std::snprintf(label, sizeof(label), "%s/%s", s.name, W4ConfigName(forced));
      Report("forced", fp4 ? "nvfp4" : "int4", label, m, us, p.bytes, copy_gbs, -1);
    }
    if (g_force >= 0 && sweep) continue;  // the forced run above was the one asked for
    auto launch = launch_with(-1);
    const double us = bench::GraphMedianMicros(launch, stream, 20, 9);
    double vs_cublas = -1;
    if (m >= 1024 && cublas != nullptr) {
      // cuBLAS bf16 on the same shape (bench/common/cublas_peer.h) with
      // random weights, as gemm_bench's peer: on zeros the tensor cores run
      // faster (~13 % for an 8K bf16 product on the H200) and would flatter
      // the peer.
      void* wb = RandomActivations(s.n * s.k, s.n * 3 + s.k);
      bool ok = true;
      auto gemm = [&](int) { ok &= bench::CublasBf16Gemm(cublas, m, s.n, s.k, wb, x, y) == CUBLAS_STATUS_SUCCESS; };
      const double cublas_us = bench::GraphMedianMicros(gemm, stream, 10, 9);
      if (ok) {
        vs_cublas = us / cublas_us;
      } else {
        std::fprintf(stderr, "cuBLAS bf16 peer failed for %s M=%lld: no ratio\n", s.name, static_cast<long long>(m));
      }
      cudaFree(wb);
    }
    Report("dense", fp4 ? "nvfp4" : "int4", s.name, m, us, p.bytes, copy_gbs, vs_cublas);
  }
  cudaFree(x);
  cudaFree(y);
}

// The experts each token picks (top_k distinct of `experts`), as lists of
// tokens per expert. bias_range < 0: uniformly at random (every expert
// about equally loaded). Else as a DeepSeek-V3 / GLM-5 router selects, and
// as gemm_bench's routing launch does with --moe-bias: the top_k of
// sigmoid(logit) + bias[e], logits uniform in [-3, 3) and each expert's bias
// uniform in [-bias_range, bias_range), so at a range of ~0.01 or more some
// experts take several times the mean and others none.
std::vector<std::vector<int>> RouteTokens(int tokens, int experts, int top_k, double bias_range) {
  Rng rng(tokens);
  std::vector<std::vector<int>> rows_of(experts);
  if (bias_range < 0) {
    for (int t = 0; t < tokens; ++t) {
      std::set<int> picked;
      while (static_cast<int>(picked.size()) < top_k) picked.insert(static_cast<int>(rng.Below(experts)));
      for (int e : picked) rows_of[e].push_back(t);
    }
    return rows_of;
  }
  std::vector<double> bias(experts), score(experts);
  for (double& b : bias) b = (2 * rng.UniformDouble() - 1) * bias_range;
  std::vector<int> order(experts);
  for (int t = 0; t < tokens; ++t) {
    for (int e = 0; e < experts; ++e) score[e] = 1 / (1 + std::exp(-(6 * rng.UniformDouble() - 3))) + bias[e];
    for (int e = 0; e < experts; ++e) order[e] = e;
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(),
                      [&](int a, int b) { return score[a] > score[b] || (score[a] == score[b] && a < b); });
    for (int j = 0; j < top_k; ++j) rows_of[order[j]].push_back(t);  // tokens in order within an expert
  }
  return rows_of;
}

// One MoE layer's grouped GEMMs at `tokens` x top-8 over 256 experts: the
// work of the experts hit, as the cuda backend runs it after routing.
void RunMoe(bool fp4, int tokens, double copy_gbs, cudaStream_t stream, const std::vector<int>& force_configs) {
  constexpr int kExperts = 256, kTopK = 8;
  constexpr int64_t kHidden = 6144, kInter = 2048;
  // Experts [E][gate/up pair 4096 x 6144] and [E][down 6144 x 2048], back
  // to back (random codes: the pair's interleaving changes nothing timed).
  const gemm::W4Packed gu = RandomPacked(fp4, 2 * kInter, kHidden, 3);
  const gemm::W4Packed dn = RandomPacked(fp4, kHidden, kInter, 4);
  auto bank = [&](const gemm::W4Packed& h, std::vector<void*>& out) {
    std::vector<uint8_t> vals;
    for (int e = 0; e < kExperts; ++e) vals.insert(vals.end(), h.values.begin(), h.values.end());
    out.push_back(Upload(vals.data(), vals.size()));
    std::vector<uint8_t> aux;
    if (h.fp4) {
      for (int e = 0; e < kExperts; ++e) aux.insert(aux.end(), h.fp4_scales.begin(), h.fp4_scales.end());
      out.push_back(Upload(aux.data(), aux.size()));
      std::vector<float> g(2 * kExperts, h.global_scale);
      out.push_back(Upload(g.data(), g.size() * 4));
    } else {
      std::vector<float> sc;
      for (int e = 0; e < kExperts; ++e) {
        sc.insert(sc.end(), h.scales.begin(), h.scales.end());
        aux.insert(aux.end(), h.zeros.begin(), h.zeros.end());
      }
      out.push_back(Upload(sc.data(), sc.size() * 4));
      out.push_back(Upload(aux.data(), aux.size()));
    }
  };
  std::vector<void*> gu_bufs, dn_bufs;
  bank(gu, gu_bufs);
  bank(dn, dn_bufs);
  const std::vector<std::vector<int>> rows_of = RouteTokens(tokens, kExperts, kTopK, g_moe_bias);
  std::vector<int32_t> offsets(kExperts + 1, 0), sorted;
  for (int e = 0; e < kExperts; ++e) {
    offsets[e + 1] = offsets[e] + static_cast<int32_t>(rows_of[e].size());
    for (int t : rows_of[e]) sorted.push_back(t);
  }
  const int hit = bench::PrintMoeRouting(tokens, offsets, g_moe_bias);
  const int64_t rows = tokens * kTopK;
  void* x = RandomActivations(tokens * kHidden, tokens + 1);
  void* h = RandomActivations(rows * kInter, tokens + 2);  // the down GEMM's input (overwritten by gate/up)
  void* yd = nullptr;
  void* ws = nullptr;
  CheckCuda(cudaMalloc(&yd, rows * kHidden * 2), "malloc");
  const size_t ws_bytes = MoeGroupedGemmWorkspaceBytes(rows, kExperts);
  CheckCuda(cudaMalloc(&ws, ws_bytes), "malloc");
  void* d_offsets = Upload(offsets.data(), offsets.size() * 4);
  void* d_sorted = Upload(sorted.data(), sorted.size() * 4);
  auto weight = [&](const gemm::W4Packed& hp, const std::vector<void*>& b, bool silu) {
    W4GemmWeight w;
    w.type = fp4 ? W4WeightType::kNvfp4 : W4WeightType::kInt4;
    w.values = static_cast<const uint8_t*>(b[0]);
    if (fp4) {
      w.fp4_scales = static_cast<const uint8_t*>(b[1]);
      w.global_scale = static_cast<const float*>(b[2]);
    } else {
      w.scales = static_cast<const float*>(b[1]);
      w.zeros = static_cast<const uint8_t*>(b[2]);
      w.group = 128;
    }
    w.rows_padded = hp.rows_padded;
    w.n = silu ? hp.rows / 2 : hp.rows;
    w.silu_pair = silu;
    return w;
  };
  int force_config = -1;
  std::string tail_name;  // the gate/up launch's tail split, for the report
  auto grouped = [&](const gemm::W4Packed& hp, const std::vector<void*>& b, bool silu, const void* in, int64_t k,
                     const int32_t* index, void* out, int64_t n) {
    W4MoeGroupedGemmParams g;
    g.num_experts = kExperts;
    g.expert_offsets = static_cast<const int32_t*>(d_offsets);
    g.max_rows = rows;
    g.expected_rows_per_expert = std::max<int64_t>(1, rows / kExperts);
    g.max_rows_per_expert = tokens;  // as the engine: a token's experts are distinct
    g.k = k;
    g.x = static_cast<const __nv_bfloat16*>(in);
    g.ldx = k;
    g.x_row_index = index;
    g.weight = weight(hp, b, silu);
    g.values_stride = static_cast<int64_t>(hp.values.size());
    g.scales_stride = static_cast<int64_t>(hp.scales.size());
    g.zeros_stride = static_cast<int64_t>(hp.zeros.size());
    g.fp4_scales_stride = static_cast<int64_t>(hp.fp4_scales.size());
    g.y = out;
    g.ldy = n;
    g.workspace = ws;
    g.workspace_bytes = ws_bytes;
    g.force_config = force_config;
    g.tail_rows = g_tail_rows;
    g.force_tail_config = g_tail_config;
    if (tail_name.empty()) {
      const W4MoeTailPlan tail = W4MoeGroupedGemmTailPlan(g);
      tail_name = tail.below > 0 ? "+tail<" + std::to_string(tail.below) + ":" + W4ConfigName(tail.config) : "-";
    }
    return LaunchW4MoeGroupedGemm(g, stream);
  };
  bench::L2Flusher flush;
  const double flush_us = bench::MedianMicros([&] { flush.Flush(stream); }, 3, 21, stream);
  auto expert_bytes = [](const gemm::W4Packed& hp) {
    return static_cast<int64_t>(hp.values.size() + (hp.fp4 ? hp.fp4_scales.size() : hp.scales.size() * 4 + hp.zeros.size()));
  };
  const int64_t bytes = hit * (expert_bytes(gu) + expert_bytes(dn));
  for (int force : force_configs) {
    force_config = force;
    tail_name.clear();
    // A forced configuration the launcher refuses (e.g. a 1-row tile whose
    // work list does not fit) is reported and skipped.
    const absl::Status st = grouped(gu, gu_bufs, true, x, kHidden, static_cast<const int32_t*>(d_sorted), h, kInter);
    if (!st.ok()) {
      std::printf("moe %d tokens, %s: %s\n", tokens, force >= 0 ? W4ConfigName(force) : "default",
                  std::string(st.message()).c_str());
      if (force < 0) std::exit(1);
      continue;
    }
    const double us = bench::MedianMicros(
        [&] {
          flush.Flush(stream);
          (void)grouped(gu, gu_bufs, true, x, kHidden, static_cast<const int32_t*>(d_sorted), h, kInter);
          (void)grouped(dn, dn_bufs, false, h, kInter, nullptr, yd, kHidden);
        },
        3, 21, stream);
    char name[96];
    std::snprintf(name, sizeof(name), "moe_%dx8_hit%d%s%s%s", tokens, hit, force >= 0 ? "/" : "",
                  force >= 0 ? W4ConfigName(force) : "", tail_name == "-" ? "" : tail_name.c_str());
    Report(force >= 0 ? "forced" : "grouped", fp4 ? "nvfp4" : "int4", name, tokens, us - flush_us, bytes, copy_gbs, -1);
  }
  for (void* p : gu_bufs) cudaFree(p);
  for (void* p : dn_bufs) cudaFree(p);
  for (void* p : {x, h, yd, ws, d_offsets, d_sorted}) cudaFree(p);
}

}  // namespace
}  // namespace spar

int main(int argc, char** argv) {
  using namespace spar;
  const char* csv = nullptr;
  bool quick = false, sweep = false, probe = false;
  std::string shapes, formats = "int4,nvfp4", ms_arg;
  std::vector<int> moe_tokens = {64};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--csv") == 0 && i + 1 < argc) csv = argv[++i];
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    if (std::strcmp(argv[i], "--probe") == 0) probe = true;
    if (std::strcmp(argv[i], "--sweep") == 0) sweep = true;
    if (std::strcmp(argv[i], "--shapes") == 0 && i + 1 < argc) shapes = argv[++i];
    if (std::strcmp(argv[i], "--formats") == 0 && i + 1 < argc) formats = argv[++i];
    if (std::strcmp(argv[i], "--ms") == 0 && i + 1 < argc) ms_arg = argv[++i];
    if (std::strcmp(argv[i], "--force") == 0 && i + 1 < argc) {
      const char* name = argv[++i];
      g_force = W4ConfigNamed(name);
      if (g_force < 0) {
        std::fprintf(stderr, "--force: no configuration %s\n", name);
        return 2;
      }
      sweep = true;
    }
    if (std::strcmp(argv[i], "--moe-tail") == 0 && i + 1 < argc) {
      const std::string v = argv[++i];
      const size_t comma = v.find(',');
      g_tail_rows = std::atoi(v.substr(0, comma).c_str());
      if (comma != std::string::npos) {
        const std::string name = v.substr(comma + 1);
        g_tail_config = W4ConfigNamed(name.c_str());
        if (g_tail_config < 0) {
          std::fprintf(stderr, "--moe-tail: no configuration %s\n", name.c_str());
          return 2;
        }
      }
    }
    if (std::strcmp(argv[i], "--moe-bias") == 0 && i + 1 < argc) {  // uneven routing (RouteTokens)
      if (!bench::ParseMoeBias(argv[++i], &g_moe_bias)) return 2;
    }
    if (std::strcmp(argv[i], "--moe-tokens") == 0 && i + 1 < argc) {
      moe_tokens.clear();
      for (const char* c = argv[++i]; *c != 0;) {
        if (std::atoi(c) > 0) moe_tokens.push_back(std::atoi(c));  // 0: no MoE run
        while (*c != 0 && *c != ',') ++c;
        if (*c == ',') ++c;
      }
    }
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no GPU\n");
    return 77;
  }
  if (csv) {
    g_csv = std::fopen(csv, "w");
    if (g_csv) std::fprintf(g_csv, "kind,format,shape,m,us,bytes,gbs,pct_copy,x_cublas\n");
  }
  const double copy_gbs = bench::MeasureCopyBandwidthGBs();
  std::printf("device %s, copy bandwidth %.0f GB/s (read + write)\n", bench::DeviceName().c_str(), copy_gbs);
  cudaStream_t stream;
  CheckCuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  cublasHandle_t cublas = nullptr;
  if (cublasCreate(&cublas) == CUBLAS_STATUS_SUCCESS) cublasSetStream(cublas, stream);
  const size_t ws_bytes = size_t{64} << 20;
  void* ws = nullptr;
  CheckCuda(cudaMalloc(&ws, ws_bytes), "malloc");
  CheckCuda(cudaMemset(ws, 0, ws_bytes), "memset");
  auto listed = [](const std::string& list, const char* name) {
    return list.empty() || ("," + list + ",").find(std::string(",") + name + ",") != std::string::npos;
  };
  for (bool fp4 : {false, true}) {
    if (!listed(formats, fp4 ? "nvfp4" : "int4")) continue;
    for (const Shape& s : kShapes) {
      if (!listed(shapes, s.name)) continue;
      std::vector<int64_t> ms = quick ? std::vector<int64_t>{1, 16} : std::vector<int64_t>{1, 4, 8, 16};
      if (std::strcmp(s.name, "expert_gate_up") == 0 || std::strcmp(s.name, "o_proj_tp8") == 0) ms.push_back(2048);
      if (!ms_arg.empty()) {
        ms.clear();
        for (const char* c = ms_arg.c_str(); *c != 0;) {
          ms.push_back(std::atoll(c));
          while (*c != 0 && *c != ',') ++c;
          if (*c == ',') ++c;
        }
      }
      RunDense(fp4, s, ms, copy_gbs, stream, ws, ws_bytes, cublas, sweep);
    }
    for (int tokens : moe_tokens) {
      std::vector<int> forced = {g_force};  // -1: the launcher's choice
      if (sweep && g_force < 0) {           // and every configuration, forced
        for (int c = 0; c < kW4NumConfigs; ++c) forced.push_back(c);
      }
      RunMoe(fp4, tokens, copy_gbs, stream, forced);
    }
  }
  if (probe) bench::RunW4StreamProbes(copy_gbs, stream);
  if (cublas) cublasDestroy(cublas);
  cudaFree(ws);
  if (g_csv) std::fclose(g_csv);
  return 0;
}
