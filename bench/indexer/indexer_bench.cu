// Indexer benchmark: paged decode logits, ragged prefill logits, top-k, and
// decode logits + top-k back to back, on random data (never zeros).
//
// Examples:
//   indexer_bench                 # every shape
//   indexer_bench decode          # one section: decode | prefill | topk | keywrite
//   indexer_bench topkprofile     # one top-k launch per path, for ncu
//   indexer_bench topkmid         # top-k of decode rows of 8K-16K: planner, row groups, short path
//
// Per shape: µs (median of CUDA-event timed runs after warm-up), TFLOP/s
// (prefill: non-masked pairs only), GB/s over the cache bytes read and its
// fraction of the copy bandwidth measured in the same run, and for one
// small shape per section the max error against kernels/ref.
#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "base/numeric.h"
#include "base/rng.h"
#include "bench/common/bench_util.h"
#include "kernels/cuda/common/device_info.h"
#include "kernels/cuda/indexer/indexer.h"
#include "kernels/cuda/indexer/topk_plan.h"
#include "kernels/ref/indexer_ref.h"
#include "kernels/ref/topk_ref.h"

namespace spar::bench {
namespace {

// Random FP8 pages: e4m3 codes (never the NaN codes) and scales in [1e-3, 2e-3).
__global__ void FillFp8Pages(uint8_t* pages, int64_t num_pages, uint64_t seed) {
  const int64_t words = num_pages * 8448 / 4;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < words; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t page = i / 2112, in_page = i % 2112;
    const uint64_t h = SplitMix64(seed ^ static_cast<uint64_t>(i));
    uint32_t v;
    if (in_page < 2048) {
      v = static_cast<uint32_t>(h);
      for (int b = 0; b < 4; ++b)
        if (((v >> (8 * b)) & 0x7f) == 0x7f) v ^= 1u << (8 * b);
    } else {
      v = __float_as_uint(1e-3f + 1e-3f * static_cast<float>(h >> 40) * (1.0f / 16777216.0f));
    }
    reinterpret_cast<uint32_t*>(pages)[page * 2112 + in_page] = v;
  }
}

// Random bf16 in [-1, 1) or fp32 in [lo, hi).
__global__ void FillBf16(uint16_t* x, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float f = static_cast<float>(SplitMix64(seed ^ i) >> 40) * (2.0f / 16777216.0f) - 1.0f;
    x[i] = static_cast<uint16_t>(__float_as_uint(f) >> 16);
  }
}
__global__ void FillF32(float* x, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = lo + (hi - lo) * static_cast<float>(SplitMix64(seed ^ i) >> 40) * (1.0f / 16777216.0f);
  }
}

template <typename T>
struct Buf {
  T* p = nullptr;
  size_t n = 0;
  explicit Buf(size_t count) : n(count) { CheckCuda(cudaMalloc(&p, std::max<size_t>(1, n) * sizeof(T)), "malloc"); }
  ~Buf() { cudaFree(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  void Up(const std::vector<T>& h) { CheckCuda(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), "h2d"); }
  std::vector<T> Down() const {
    std::vector<T> h(n);
    CheckCuda(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "d2h");
    return h;
  }
};

void Ok(const absl::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, std::string(s.message()).c_str());
    std::exit(1);
  }
}

double g_copy_gbs = 0;

std::vector<std::string> g_summary;

void Summary(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void Summary(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  std::printf("%s\n", buf);
  g_summary.push_back(buf);
}

// Per-call µs of `fn(stream)` replayed from a CUDA graph (bench_util.h
// GraphMedianMicros): GPU time without host launch overhead, which is how
// the engine replays a decode step. On the device VM a stream launch costs
// several µs of host time, so a few small kernels launched one by one time
// the host, not the GPU.
template <typename Fn>
double GraphMicros(Fn&& fn, int per_graph = 10, int reps = 9) {
  cudaStream_t stream;
  CheckCuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  const double us = GraphMedianMicros([&](int) { fn(stream); }, stream, per_graph, reps);
  cudaStreamDestroy(stream);
  return us;
}

// --- decode ------------------------------------------------------------------------

struct DecodeSetup {
  int batch, ctx, heads, next_n;
  int64_t pages;
  Buf<uint8_t> cache;
  Buf<int32_t> table, ctx_lens;
  Buf<uint16_t> q;
  Buf<float> w, logits;
  IndexerLogitsPagedParams p;
  DecodeSetup(int b, int c, int h, int nn)
      : batch(b), ctx(c), heads(h), next_n(nn), pages(int64_t{b} * ((c + 63) / 64)), cache(pages * 8448),
        table(pages), ctx_lens(int64_t{b} * nn), q(int64_t{b} * nn * h * 128), w(int64_t{b} * nn * h),
        logits(int64_t{b} * nn * c) {
    FillFp8Pages<<<1024, 256>>>(cache.p, pages, 1234 + b + c);
    FillBf16<<<256, 256>>>(q.p, q.n, 99 + h);
    FillF32<<<256, 256>>>(w.p, w.n, 98, -0.02f, 0.05f);
    CheckCuda(cudaGetLastError(), "fill");
    // Pages scattered over the cache: a random permutation.
    std::vector<int32_t> perm(pages);
    std::iota(perm.begin(), perm.end(), 0);
    Rng rng(7);
    for (int64_t i = pages - 1; i > 0; --i) std::swap(perm[i], perm[rng.Below(i + 1)]);
    table.Up(perm);
    std::vector<int32_t> lens(int64_t{b} * nn);
    for (int s = 0; s < b; ++s)
      for (int j = 0; j < nn; ++j) lens[s * nn + j] = c - nn + j + 1;
    ctx_lens.Up(lens);
    p.num_seqs = b;
    p.next_n = nn;
    p.heads = h;
    p.q = reinterpret_cast<const __nv_bfloat16*>(q.p);
    p.q_stride = h * 128;
    p.w = w.p;
    p.w_stride = h;
    p.context_lens = ctx_lens.p;
    p.max_context_len = c;
    p.block_table = table.p;
    p.block_table_stride = (c + 63) / 64;
    p.format = IndexerFormat::kFp8;
    p.cache = cache.p;
    p.logits = logits.p;
    p.logits_stride = c;
  }
};

// Max |gpu - ref| / max|ref| over the decode logits of a small setup.
double DecodeError(DecodeSetup& d) {
  const std::vector<uint8_t> pages = d.cache.Down();
  const std::vector<int32_t> table = d.table.Down(), lens = d.ctx_lens.Down();
  std::vector<float> q(d.q.n);
  const std::vector<uint16_t> qb = d.q.Down();
  for (size_t i = 0; i < q.size(); ++i) q[i] = Bf16ToFloat(qb[i]);
  const std::vector<float> w = d.w.Down(), got = d.logits.Down();
  const int rows = d.batch * d.next_n;
  std::vector<float> want(static_cast<size_t>(rows) * d.ctx);
  std::vector<const int32_t*> tables(rows);
  for (int r = 0; r < rows; ++r) tables[r] = table.data() + (r / d.next_n) * d.p.block_table_stride;
  ref::IndexerLogitsPaged(q.data(), w.data(), rows, d.heads, {IndexerFormat::kFp8, pages.data()}, tables.data(),
                          lens.data(), want.data(), d.ctx);
  double err = 0, mx = 0;
  for (int r = 0; r < rows; ++r)
    for (int s = 0; s < lens[r]; ++s) {
      const size_t i = static_cast<size_t>(r) * d.ctx + s;
      err = std::max(err, std::fabs(static_cast<double>(got[i]) - want[i]));
      mx = std::max(mx, std::fabs(static_cast<double>(want[i])));
    }
  return mx > 0 ? err / mx : err;
}

void BenchDecode() {
  std::printf("\n== paged decode logits (FP8 cache, 132 B/key) ==\n");
  std::printf("%-28s %10s %10s %10s %8s %10s\n", "shape", "us", "TFLOP/s", "cacheGB/s", "%copy", "max_err");
  struct Shape {
    int batch, ctx, heads, next_n;
  };
  const Shape shapes[] = {{1, 4096, 32, 1},    {1, 32768, 32, 1},  {1, 131072, 32, 1}, {32, 4096, 32, 1},
                          {32, 32768, 32, 1},  {32, 131072, 32, 1}, {64, 4096, 32, 1},  {64, 32768, 32, 1},
                          {64, 131072, 32, 1}, {64, 131072, 32, 2}, {64, 32768, 64, 1}, {64, 131072, 64, 1},
                          {64, 32768, 64, 2}};
  for (const Shape& s : shapes) {
    DecodeSetup d(s.batch, s.ctx, s.heads, s.next_n);
    const double us = MedianMicros([&] { Ok(LaunchIndexerLogitsPaged(d.p, nullptr), "decode"); }, 3, 20);
    const double keys = double(s.batch) * s.ctx;
    const double cache_bytes = keys * 132;
    const double flop = keys * s.next_n * s.heads * 256.0;
    std::string err = "-";
    if (s.batch == 1 && s.ctx == 4096) err = std::to_string(DecodeError(d));
    char name[64];
    std::snprintf(name, sizeof(name), "B%d ctx%d H%d n%d", s.batch, s.ctx, s.heads, s.next_n);
    const double gbs = cache_bytes / (us * 1e-6) / 1e9;
    std::printf("%-28s %10.1f %10.1f %10.0f %7.1f%% %10s\n", name, us, flop / (us * 1e-6) / 1e12, gbs,
                100.0 * gbs / g_copy_gbs, err.c_str());
    if (s.batch == 64 && s.ctx == 131072 && s.next_n == 1)
      Summary("decode %-22s %8.1f us  %6.0f GB/s  %5.1f%% of copy (target >= 75%%, <= 350 us)", name, us, gbs,
              100.0 * gbs / g_copy_gbs);
  }
}

// The paged decode logits' pages per CTA swept (0: the launcher's split), as
// graph replays: `indexer_bench decodesweep`.
void BenchDecodeSweep() {
  std::printf("\n== paged decode logits, pages per CTA (FP8, H32, graph replays) ==\n");
  struct Shape {
    int batch, ctx;
  };
  for (const Shape s : {Shape{1, 8192}, Shape{1, 32768}, Shape{1, 131072}, Shape{8, 32768}, Shape{64, 32768},
                        Shape{64, 131072}}) {
    DecodeSetup d(s.batch, s.ctx, 32, 1);
    std::printf("B%d ctx%d:", s.batch, s.ctx);
    for (int ppc : {0, 1, 2, 4, 8, 16, 32, 64}) {
      if (ppc > (s.ctx + 63) / 64) continue;
      d.p.pages_per_cta = ppc;
      const double us = GraphMicros([&](cudaStream_t st) { Ok(LaunchIndexerLogitsPaged(d.p, st), "decode"); });
      std::printf("  %s%d %.1f", ppc == 0 ? "planned" : "ppc", ppc, us);
    }
    std::printf(" us\n");
  }
}

// --- prefill -----------------------------------------------------------------------

void BenchPrefill() {
  std::printf("\n== ragged prefill logits (FP8 contiguous keys, causal) ==\n");
  std::printf("%-28s %10s %10s %10s\n", "shape", "us", "TFLOP/s", "max_err");
  struct Shape {
    int queries, keys, heads;
  };
  const Shape shapes[] = {{2048, 2048, 32}, {4096, 8192, 32}, {16384, 16384, 32},
                          {2048, 2048, 64}, {4096, 8192, 64}, {16384, 16384, 64}};
  for (const Shape& s : shapes) {
    Buf<uint8_t> keys(int64_t{s.keys} * 128);
    Buf<float> scale(s.keys), w(int64_t{s.queries} * s.heads), logits(int64_t{s.queries} * s.keys);
    Buf<uint16_t> q(int64_t{s.queries} * s.heads * 128);
    Buf<int32_t> ks(s.queries), ke(s.queries);
    {
      // Keys: e4m3 codes from the page filler (first 8 KB of each 8448 B page are codes).
      Buf<uint8_t> tmp((s.keys + 63) / 64 * 8448);
      FillFp8Pages<<<512, 256>>>(tmp.p, (s.keys + 63) / 64, 555);
      CheckCuda(cudaGetLastError(), "fill");
      for (int pg = 0; pg < (s.keys + 63) / 64; ++pg) {
        const int n = std::min(64, s.keys - pg * 64);
        CheckCuda(cudaMemcpy(keys.p + int64_t{pg} * 8192, tmp.p + int64_t{pg} * 8448, n * 128, cudaMemcpyDeviceToDevice), "cp");
        CheckCuda(cudaMemcpy(scale.p + pg * 64, tmp.p + int64_t{pg} * 8448 + 8192, n * 4, cudaMemcpyDeviceToDevice), "cp");
      }
    }
    FillBf16<<<256, 256>>>(q.p, q.n, 5 + s.heads);
    FillF32<<<256, 256>>>(w.p, w.n, 6, -0.02f, 0.05f);
    std::vector<int32_t> hks(s.queries, 0), hke(s.queries);
    double pairs = 0;
    for (int t = 0; t < s.queries; ++t) {
      hke[t] = s.keys - s.queries + t + 1;  // the last `queries` positions of a `keys`-long sequence
      pairs += hke[t];
    }
    ks.Up(hks);
    ke.Up(hke);
    IndexerLogitsParams p;
    p.rows = s.queries;
    p.heads = s.heads;
    p.q = reinterpret_cast<const __nv_bfloat16*>(q.p);
    p.q_stride = s.heads * 128;
    p.w = w.p;
    p.w_stride = s.heads;
    p.format = IndexerFormat::kFp8;
    p.keys = keys.p;
    p.k_scale = scale.p;
    p.num_keys = s.keys;
    p.ks = ks.p;
    p.ke = ke.p;
    p.logits = logits.p;
    p.logits_stride = s.keys;
    const double us = MedianMicros([&] { Ok(LaunchIndexerLogits(p, nullptr), "prefill"); }, 3, 10);
    const double tflops = pairs * s.heads * 256.0 / (us * 1e-6) / 1e12;
    std::string err = "-";
    if (s.queries == 2048) {
      // Check 64 spread rows against the reference.
      const std::vector<uint8_t> kb = keys.Down();
      const std::vector<float> ksc = scale.Down(), wv = w.Down(), got = logits.Down();
      const std::vector<uint16_t> qb = q.Down();
      std::vector<float> kv(kb.size());
      for (size_t i = 0; i < kb.size(); ++i) kv[i] = E4m3ToFloat(kb[i]);
      double e = 0, mx = 0;
      for (int t = 5; t < s.queries; t += 32) {
        std::vector<float> qrow(s.heads * 128), out(s.keys);
        for (int i = 0; i < s.heads * 128; ++i) qrow[i] = Bf16ToFloat(qb[int64_t{t} * s.heads * 128 + i]);
        ref::IndexerLogits(qrow.data(), wv.data() + int64_t{t} * s.heads, 1, s.heads, 128, kv.data(), ksc.data(),
                           s.keys, &hks[t], &hke[t], out.data());
        for (int k = hks[t]; k < hke[t]; ++k) {
          e = std::max(e, std::fabs(static_cast<double>(got[int64_t{t} * s.keys + k]) - out[k]));
          mx = std::max(mx, std::fabs(static_cast<double>(out[k])));
        }
      }
      err = std::to_string(mx > 0 ? e / mx : e);
    }
    char name[64];
    std::snprintf(name, sizeof(name), "%dx%d H%d", s.queries, s.keys, s.heads);
    std::printf("%-28s %10.1f %10.1f %10s\n", name, us, tflops, err.c_str());
    if (s.queries == 4096) Summary("prefill %-21s %8.1f us  %6.1f TFLOP/s (target >= 300)", name, us, tflops);
  }
}

// --- top-k -------------------------------------------------------------------------

// Top-k params over a [rows, len] buffer; split_chunks as given (0: the
// planner's choice) with a workspace of TopKWorkspaceBytes when one is needed.
struct TopKRun {
  TopKParams p;
  Buf<uint8_t> ws;
  TopKRun(const float* logits, int rows, int len, int32_t* out, int split_chunks, const int32_t* row_len = nullptr,
          const TopKSplitPlan* plan = nullptr)
      : p(Params(logits, rows, len, out, split_chunks, row_len, plan)), ws(TopKWorkspaceBytes(p)) {
    if (ws.n > 0) {
      p.workspace = ws.p;
      p.workspace_bytes = ws.n;
    }
  }
  static TopKParams Params(const float* logits, int rows, int len, int32_t* out, int split_chunks,
                           const int32_t* row_len, const TopKSplitPlan* plan) {
    TopKParams p;
    p.rows = rows;
    p.k = 2048;
    p.logits = logits;
    p.logits_stride = len;
    p.row_len = row_len;
    p.num_cols = len;
    p.out = out;
    p.out_stride = 2048;
    p.split_chunks = split_chunks;
    p.plan = plan;
    return p;
  }
};

struct TopKShape {
  int rows, len;
  bool real_like;
  // Positions each row holds (row_len), when fewer than len: a decode
  // graph's top-k is planned for its bucket's width (a power of two of cache
  // blocks, DecodeGraphKey::max_context) and the rows hold what the
  // sequences have, between half of it and all.
  int valid = 0;
};

// Variant code of the short-row path forced (rows the planner gives the
// row-group path: kTopKGroupMinLen < len <= kTopKShortMaxLen).
constexpr int kForcedShort = -1000;

void BenchTopK(const std::vector<TopKShape>& shapes) {
  std::printf("\n== top-k 2048 (fp32 logits, exact) ==\n");
  std::printf("%-34s %6s %10s %10s %10s %8s\n", "shape", "chunks", "us", "graph us", "GB/s", "exact");
  const TopKSplitPlan short_plan;  // no chunks: LaunchTopK takes the short-row path
  for (const TopKShape& s : shapes) {
    Buf<float> logits(int64_t{s.rows} * s.len);
    Buf<int32_t> out(int64_t{s.rows} * 2048);
    if (s.real_like) {
      // Real-like rows: the decode logits of random q / FP8 keys (32 heads).
      DecodeSetup d(s.rows, s.len, 32, 1);
      Ok(LaunchIndexerLogitsPaged(d.p, nullptr), "decode");
      CheckCuda(cudaMemcpy(logits.p, d.logits.p, logits.n * 4, cudaMemcpyDeviceToDevice), "cp");
    } else {
      FillF32<<<1024, 256>>>(logits.p, logits.n, 77, -5.0f, 5.0f);
    }
    const std::vector<float> h = logits.Down();
    const int valid = s.valid > 0 ? s.valid : s.len;
    Buf<int32_t> row_len(s.rows);
    CheckCuda(cudaMemcpy(row_len.p, std::vector<int32_t>(s.rows, valid).data(), row_len.n * 4, cudaMemcpyHostToDevice),
              "row_len");
    char name[64];
    std::snprintf(name, sizeof(name), "%d x %d %s", s.rows, s.len, s.real_like ? "real-like" : "uniform");
    if (valid < s.len) std::snprintf(name + std::strlen(name), sizeof(name) - std::strlen(name), " (%d)", valid);
    const bool target = s.real_like && ((s.rows == 64 && s.len == 131072) || (s.rows == 1 && s.len == 32768) ||
                                        (s.rows == 1 && s.len == 8192));
    // The planner's choice, the one-CTA path, and (real-like rows) a sweep of
    // chunk counts, then the row-group plans that fit one CTA per SM
    // (variants -4, -8, -16: that many keys per thread).
    const int sms = CurrentDeviceInfo().sm_count;
    std::vector<int> variants = {0, 1};
    if (s.real_like && s.rows <= 128) {
      for (int c : {2, 4, 8, 16, 32, 64}) variants.push_back(c);
    }
    for (int keys : kTopKGroupKeyOptions) {
      const TopKSplitPlan g = TopKGroupPlan(s.rows, s.len, keys);
      if (g.group() && s.rows * g.chunks <= sms) variants.push_back(-keys);
    }
    if (s.len > kTopKGroupMinLen && s.len <= kTopKShortMaxLen) variants.push_back(kForcedShort);
    for (int chunks : variants) {
      // The plan LaunchTopK follows: the forced group plan, or the planner's.
      const TopKSplitPlan chosen = chunks == kForcedShort ? short_plan
                                   : chunks < 0          ? TopKGroupPlan(s.rows, s.len, -chunks)
                                                         : PlanTopKSplit(s.rows, s.len, sms, chunks);
      TopKRun run(logits.p, s.rows, s.len, out.p, chunks < 0 ? 0 : chunks, valid < s.len ? row_len.p : nullptr,
                  chunks < 0 ? &chosen : nullptr);
      const int planned = chosen.chunks;  // 1: one CTA per row
      if (chunks > 1 && planned != chunks) continue;  // clamped to a variant already timed
      CheckCuda(cudaMemset(out.p, 0x7f, out.n * 4), "poison");
      const double us = MedianMicros([&] { Ok(LaunchTopK(run.p, nullptr), "topk"); }, 3, 30);
      const double gus = GraphMicros([&](cudaStream_t st) { Ok(LaunchTopK(run.p, st), "topk"); });
      // Exactness against the reference on up to 4 rows (the first, the last, two between).
      const std::vector<int32_t> got = out.Down();
      std::vector<int32_t> want(2048);
      bool exact = true;
      for (int r : {0, s.rows / 3, 2 * s.rows / 3, s.rows - 1}) {
        ref::TopK(h.data() + int64_t{r} * s.len, valid, 2048, want.data());
        exact = exact && std::equal(want.begin(), want.end(), got.begin() + int64_t{r} * 2048);
      }
      const double gbs = double(s.rows) * valid * 4 / (us * 1e-6) / 1e9;
      char tag[16];
      if (chosen.group()) {
        std::snprintf(tag, sizeof(tag), "%sG%dx%d", chunks == 0 ? "P" : "", chosen.group_keys, chosen.chunks);
      } else if ((chunks == 0 || chunks == kForcedShort) && s.len <= kTopKShortMaxLen) {
        std::snprintf(tag, sizeof(tag), chunks == 0 ? "short" : "Sshort");  // the short-row path (S: forced)
      } else {
        std::snprintf(tag, sizeof(tag), "%s%d", chunks == 0 ? "P" : "", planned);
      }
      std::printf("%-34s %6s %10.1f %10.1f %10.0f %8s\n", name, tag, us, gus, gbs, exact ? "yes" : "NO");
      if (target && chunks <= 1)
        Summary("topk %-24s %-6s %7.1f us, graph %7.1f us  exact=%s (targets: 64x128K <= 60, 1x32K <= 15, 1x8K <= 8)",
                name, chunks == 1 ? "1-CTA" : tag, us, gus, exact ? "yes" : "NO");
    }
  }

  std::printf("\n== decode logits + top-k back to back (FP8, H32) ==\n");
  for (int batch : {1, 64}) {
    for (int ctx : {32768, 131072}) {
      DecodeSetup d(batch, ctx, 32, 1);
      Buf<int32_t> out(int64_t{batch} * 2048);
      TopKRun run(d.logits.p, batch, ctx, out.p, 0, d.ctx_lens.p);
      const double us = MedianMicros(
          [&] {
            Ok(LaunchIndexerLogitsPaged(d.p, nullptr), "decode");
            Ok(LaunchTopK(run.p, nullptr), "topk");
          },
          3, 20);
      const double gus = GraphMicros([&](cudaStream_t st) {
        Ok(LaunchIndexerLogitsPaged(d.p, st), "decode");
        Ok(LaunchTopK(run.p, st), "topk");
      });
      std::printf("B%d ctx%d: %.1f us (graph replay %.1f us)\n", batch, ctx, us, gus);
    }
  }
}

// One launch per path for the target shapes and the decode rows between
// them, for a profiler (ncu) to time each kernel: `indexer_bench topkprofile`.
void BenchTopKProfile() {
  for (const auto& shape : {std::pair<int, int>{64, 131072}, std::pair<int, int>{1, 32768}, std::pair<int, int>{1, 8192},
                            std::pair<int, int>{1, 131072}, std::pair<int, int>{8, 32768}}) {
    const int rows = shape.first, len = shape.second;
    DecodeSetup d(rows, len, 32, 1);
    Ok(LaunchIndexerLogitsPaged(d.p, nullptr), "decode");
    Buf<int32_t> out(int64_t{rows} * 2048);
    for (int chunks : {0, 1}) {
      TopKRun run(d.logits.p, rows, len, out.p, chunks);
      Ok(LaunchTopK(run.p, nullptr), "topk");
      CheckCuda(cudaDeviceSynchronize(), "topk");
      std::printf("profiled %d x %d, %s\n", rows, len, chunks == 0 ? "planned" : "one CTA per row");
    }
    for (int keys : kTopKGroupKeyOptions) {
      const TopKSplitPlan g = TopKGroupPlan(rows, len, keys);
      if (!g.group() || rows * g.chunks > CurrentDeviceInfo().sm_count) continue;
      TopKRun run(d.logits.p, rows, len, out.p, 0, nullptr, &g);
      Ok(LaunchTopK(run.p, nullptr), "topk");
      CheckCuda(cudaDeviceSynchronize(), "topk");
      std::printf("profiled %d x %d, row group of %d keys per thread x %d chunks\n", rows, len, keys, g.chunks);
    }
  }
}

// --- key write ---------------------------------------------------------------------

void BenchKeyWrite() {
  std::printf("\n== key write (LayerNorm + RoPE + FP8 quantize into pages) ==\n");
  for (int tokens : {64, 4096, 16384}) {
    Buf<uint16_t> x(int64_t{tokens} * 128);
    Buf<float> nw(128), nb(128), cs(16384 * 32), sn(16384 * 32);
    Buf<int32_t> pos(tokens), slots(tokens);
    Buf<uint8_t> cache(int64_t{(tokens + 63) / 64} * 8448);
    FillBf16<<<256, 256>>>(x.p, x.n, 3);
    FillF32<<<1, 128>>>(nw.p, 128, 4, 0.5f, 1.5f);
    FillF32<<<1, 128>>>(nb.p, 128, 5, -0.1f, 0.1f);
    FillF32<<<256, 256>>>(cs.p, cs.n, 6, -1.0f, 1.0f);
    FillF32<<<256, 256>>>(sn.p, sn.n, 7, -1.0f, 1.0f);
    std::vector<int32_t> hp(tokens);
    std::iota(hp.begin(), hp.end(), 0);
    pos.Up(hp);
    slots.Up(hp);
    IndexerKeyWriteParams p;
    p.tokens = tokens;
    p.x = reinterpret_cast<const __nv_bfloat16*>(x.p);
    p.norm_weight = nw.p;
    p.norm_bias = nb.p;
    p.positions = pos.p;
    p.rope = {cs.p, sn.p, 16384, ref::RopePairs::kInterleaved};
    p.slots = slots.p;
    p.cache = cache.p;
    const double us = MedianMicros([&] { Ok(LaunchIndexerKeyWrite(p, nullptr), "keywrite"); }, 3, 20);
    std::printf("tokens %6d: %8.1f us\n", tokens, us);
  }
}

}  // namespace
}  // namespace spar::bench

int main(int argc, char** argv) {
  using namespace spar::bench;
  const std::string only = argc > 1 ? argv[1] : "";
  std::printf("device: %s (sm80 code)\n", DeviceName().c_str());
  g_copy_gbs = MeasureCopyBandwidthGBs();
  std::printf("copy bandwidth (read + write): %.0f GB/s\n", g_copy_gbs);
  if (only.empty() || only == "decode") BenchDecode();
  if (only.empty() || only == "prefill") BenchPrefill();
  if (only.empty() || only == "topk") {
    BenchTopK({{64, 131072, true}, {1, 32768, true},   {1, 8192, true},     {64, 131072, false}, {1, 32768, false},
               {1, 8192, false},   {1, 131072, true},  {64, 32768, true},   {64, 8192, true},    {1, 200000, true},
               {128, 131072, true}, {8, 131072, true}, {32, 32768, true},   {256, 32768, true},  {4096, 8192, true},
               {1, 8193, true},    {1, 65536, true},   {8, 32768, true},    {1, 16384, true},    {1, 4096, true}});
  }
  // Decode rows between the short-row and the row-group paths' ranges.
  if (only == "topkmid") {
    BenchTopK({{1, 8192, true}, {1, 8193, true}, {1, 10240, true}, {1, 12289, true}, {1, 16384, true},
               {8, 8193, true}, {8, 12289, true}, {64, 8193, true}});
  }
  if (only.empty() || only == "keywrite") BenchKeyWrite();
  // Decode graph buckets: rows planned for a power-of-two width, holding
  // half of it to all of it (TopKShape::valid).
  if (only == "topkbucket") {
    BenchTopK({{1, 16384, true, 8193}, {1, 16384, true, 10240}, {1, 16384, true, 12289}, {1, 16384, true},
               {1, 8192, true, 4097}, {1, 32768, true, 16385}, {1, 32768, true, 24576}, {1, 65536, true, 32769},
               {8, 16384, true, 8193}, {64, 16384, true, 8193}});
  }
  if (only == "topkprofile") BenchTopKProfile();
  if (only == "decodesweep") BenchDecodeSweep();
  std::printf("\n== summary (copy %.0f GB/s) ==\n", g_copy_gbs);
  for (const std::string& s : g_summary) std::printf("%s\n", s.c_str());
  return 0;
}
