// What gemm_bench's parts share (gemm_bench.cu: the dense shapes and the
// command line; gemm_bench_moe.cu: the MoE layer; gemm_bench_fill.cu: the
// random fills): the run's stream and copy bandwidth, the timing loops, the
// options and the result rows.
#ifndef SPAR_BENCH_GEMM_GEMM_BENCH_COMMON_H_
#define SPAR_BENCH_GEMM_GEMM_BENCH_COMMON_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench/common/bench_util.h"
#include "kernels/cuda/gemm/gemm_config.h"
#include "kernels/cuda/gemm/w8a16_gemm.h"

namespace spar::gemm_bench {

using bench::CheckCuda;
using bench::DeviceAlloc;
using bench::GraphMedianMicros;

// Device-side random fills (gemm_bench_fill.cu), on the legacy stream.
// Random e4m3 bytes without the NaN codes (0x7f, 0xff).
void FillE4m3(uint8_t* p, size_t n, uint64_t seed);
// Scales in [2^-9, 2^-7): like real weight_scale_inv values.
void FillScales(float* p, size_t n, uint64_t seed);
// bf16 uniform in [-1, 1).
void FillBf16(__nv_bfloat16* p, size_t n, uint64_t seed);
// fp32 uniform in [-scale, scale).
void FillF32(float* p, size_t n, uint64_t seed, float scale);

inline void Check(const absl::Status& st, const char* what) {
  if (!st.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, std::string(st.message()).c_str());
    std::exit(1);
  }
}

// All benchmark work runs on this stream (graph capture needs a non-legacy stream).
inline cudaStream_t g_stream = nullptr;
inline double g_copy_gbs = 0;  // device-to-device copy, bytes read + written

// Median µs per launch of fn(i) (i = launch index, for weight rotation):
// `batches` timed batches of `per_batch` back-to-back launches, enqueued
// from the host as they run ("stream" timing: includes any host launch cost
// the GPU waits for).
template <typename Fn>
inline double TimePerLaunch(Fn&& fn, int per_batch, int batches = 7, int warmup = 3) {
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
inline double TimePerLaunchGraph(Fn&& fn, int per_batch, int batches = 7, int warmup = 3) {
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
  float moe_bias = 0.001f;     // --moe-bias: the routing bias's range (BenchMoe)
};


// Every weight's layout (--tiled).
inline GemmWeightLayout g_layout = GemmWeightLayout::kRowMajor;

struct Row {
  std::string name;
  int64_t m, n, k;
  std::string plan;
  double us, tflops, gbs, roof_pct, max_err;
  double us_stream = 0;  // host-enqueued launches (us: graph replay)
};

// --csv: rows are written as they are measured, so a run cut short (time
// limit, failed launch) still leaves every finished row.
inline FILE* g_csv = nullptr;

inline void Emit(const Row& r) {
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

inline std::string PlanName(const gemm::GemmPlan& p) {
  return std::string(gemm::GetTileConfig(p.config).name) + "/s" + std::to_string(p.splits);
}

// The MoE layer of 256 experts, top-8, at `tokens` tokens (gemm_bench_moe.cu).
void BenchMoe(int64_t tokens, void* split_ws, size_t split_ws_bytes, const Options& opt);

}  // namespace spar::gemm_bench

#endif  // SPAR_BENCH_GEMM_GEMM_BENCH_COMMON_H_
