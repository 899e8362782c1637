#include "kernels/cuda/common/arch.cuh"
// GPU sampler replicating ref::SampleToken's choice (see sampling.h).
//
// One 1024-thread CTA per row, in passes over the row:
//      (a token mask, when given, makes disallowed ids' logits -inf in
//      every read of the raw logits below; a mask allowing nothing is
//      ignored)
//   0  logprobs of the raw logits (log-sum-exp in double, top-n list)
//   1  copy the logits to the workspace and apply the penalties
//   2  greedy rows: argmax (ties to the lower id), done
//   3  x = logit / T, its max and the argmax
//   4  lse = max + log Σ exp(x - max) in double, as the reference
//   5  prob = exp(x - lse) in double -> 2^-60 fixed point (exact integer sums
//      from here on, deterministic without float atomics); the sort key
//      (x, or -inf where prob underflows to 0, which the reference orders by
//      id among equal zero probabilities); counts and masses above 12
//      thresholds max - delta
//   6  top-k / top-p: the kept set is a prefix of the reference's order
//      (prob descending, ties to the lower id). Find the composite key of its
//      last element: from a candidate set {x >= threshold} of <= 4096 that
//      surely holds the prefix, sorted in shared memory (common case), or
//      by a radix descent over the whole row (flat distributions)
//   7  min-p floor = min_p * max prob (double compare, as the reference)
//   8  inverse-CDF walk in ascending id order: u = U(seed, step) * total
#include "kernels/cuda/sampling/sampling.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "base/rng.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/invalid_arg.h"

namespace spar {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kCap = 4096;  // candidates sorted in shared memory
constexpr int kNumThresholds = 12;
__constant__ float kDelta[kNumThresholds] = {0.5f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 8.0f, 10.0f, 13.0f, 17.0f, 24.0f};
constexpr double kFix = 1152921504606846976.0;  // 2^60

struct Smem {
  uint64_t cand_c[kCap];
  uint64_t cand_p[kCap];
  uint64_t hsum[256];
  uint64_t hmax[256];
  uint32_t hcnt[256];
  uint64_t tpart[kWarps][2 * kNumThresholds];
  uint64_t tstat[2 * kNumThresholds];
  uint64_t red_u[33];
  double red_d[33];
  float red_f[33];
  int red_i[33];
  uint64_t wsum[kWarps];
  int wlast[kWarps];
  uint64_t sel_r_above, sel_s_above, walk_base, walk_u;
  int sel_digit, cand_count, walk_warp, token;
};

// The reference's order as one integer: larger value first, ties to the
// lower id (-0 and +0 tie; NaN sorts as -inf).
__device__ __forceinline__ uint64_t Composite(float key, int id) {
  key = isnan(key) ? -INFINITY : key + 0.0f;
  const uint32_t b = __float_as_uint(key);
  const uint32_t ord = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return (static_cast<uint64_t>(ord) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(id));
}
__device__ __forceinline__ int CompositeId(uint64_t c) { return static_cast<int>(~static_cast<uint32_t>(c)); }

// Block-wide reductions (1024 threads); a fixed shuffle tree, so double sums
// are deterministic. Every thread gets the result.
template <typename T, typename Op>
__device__ __forceinline__ T BlockReduce(T v, Op op, T* sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = sh[lane];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) w = op(w, __shfl_xor_sync(0xffffffffu, w, o));
    if (lane == 0) sh[32] = w;
  }
  __syncthreads();
  const T r = sh[32];
  __syncthreads();
  return r;
}

struct MaxU64 {
  __device__ uint64_t operator()(uint64_t a, uint64_t b) const { return a > b ? a : b; }
};
struct MaxF {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumD {
  __device__ double operator()(double a, double b) const { return a + b; }
};
struct MinI {
  __device__ int operator()(int a, int b) const { return a < b ? a : b; }
};
struct MaxI {
  __device__ int operator()(int a, int b) const { return a > b ? a : b; }
};

__device__ __forceinline__ uint64_t WarpSumU64(uint64_t v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Radix descent over the composite keys of the whole row, 8 bits a pass.
// kRank: the element with exactly `target` larger keys. kCum: the first
// element (in key order) at which the cumulative fixed-point probability
// reaches `target`; false when it never does. Integer shared atomics only.
__device__ bool RadixSelect(const float* ws, const uint64_t* wp, int vocab, bool cum, uint64_t target, Smem& sm,
                            uint64_t* key_out, int64_t* rank_out) {
  const int tid = threadIdx.x;
  uint64_t prefix = 0;
  if (tid == 0) {
    sm.sel_r_above = 0;
    sm.sel_s_above = 0;
  }
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = tid; b < 256; b += kThreads) {
      sm.hcnt[b] = 0;
      sm.hsum[b] = 0;
      sm.hmax[b] = 0;
    }
    __syncthreads();
    const int hi = shift + 8;
    for (int i = tid; i < vocab; i += kThreads) {
      const uint64_t c = Composite(ws[i], i);
      if (hi < 64 && (c >> hi) != (prefix >> hi)) continue;
      const int d = static_cast<int>((c >> shift) & 0xff);
      atomicAdd(&sm.hcnt[d], 1u);
      if (cum) atomicAdd(reinterpret_cast<unsigned long long*>(&sm.hsum[d]), static_cast<unsigned long long>(wp[i]));
      atomicMax(reinterpret_cast<unsigned long long*>(&sm.hmax[d]), static_cast<unsigned long long>(c));
    }
    __syncthreads();
    if (tid == 0) {
      uint64_t r_above = sm.sel_r_above, s_above = sm.sel_s_above;
      int d = 255;
      for (; d >= 0; --d) {
        if (cum ? (s_above + sm.hsum[d] >= target) : (r_above + sm.hcnt[d] > target)) break;
        r_above += sm.hcnt[d];
        s_above += sm.hsum[d];
      }
      sm.sel_digit = d;
      sm.sel_r_above = r_above;
      sm.sel_s_above = s_above;
    }
    __syncthreads();
    const int d = sm.sel_digit;
    if (d < 0) return false;
    prefix |= static_cast<uint64_t>(d) << shift;
    const bool unique = sm.hcnt[d] == 1;
    const uint64_t only = sm.hmax[d];
    const int64_t rank = static_cast<int64_t>(sm.sel_r_above);
    __syncthreads();  // before the next pass clears the histogram
    if (unique || shift == 0) {
      *key_out = unique ? only : prefix;
      *rank_out = rank;
      return true;
    }
  }
  return false;  // not reached: composite keys are unique
}

__global__ void __launch_bounds__(kThreads, 1) SampleKernel(const SampleParams p) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  const int row = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int V = p.vocab;
  const SamplingParams sp = p.params[row].sampling;
  const uint64_t step = p.params[row].step;
  const float* raw_row = p.logits + static_cast<int64_t>(row) * p.logits_stride;
  // The row's token mask, unless it allows no id with a finite logit (then
  // unmasked, as the reference: a row always has a choice).
  const uint32_t* mask = nullptr;
  if (p.token_mask != nullptr) {
    const uint32_t* m = p.token_mask + static_cast<int64_t>(row) * p.token_mask_stride;
    int any = 0;
    for (int i = tid; i < V; i += kThreads) any |= ((m[i >> 5] >> (i & 31)) & 1u) != 0u && raw_row[i] > -INFINITY;
    if (BlockReduce(any, MaxI(), sm.red_i) != 0) mask = m;
  }
  // The logit of id i after the mask: every read of the row goes through it.
  auto raw_at = [&](int i) -> float {
    return mask != nullptr && ((mask[i >> 5] >> (i & 31)) & 1u) == 0u ? -INFINITY : raw_row[i];
  };
  const size_t keys_bytes = (static_cast<size_t>(p.rows) * V * sizeof(float) + 15) / 16 * 16;
  float* ws = reinterpret_cast<float*>(p.workspace) + static_cast<size_t>(row) * V;
  uint64_t* wp = reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(p.workspace) + keys_bytes) + static_cast<size_t>(row) * V;

  // Phase 0: logprobs of the raw logits.
  double raw_lse = 0.0;
  if (p.token_logprobs != nullptr || p.top_logprobs > 0) {
    float mx = -INFINITY;
    for (int i = tid; i < V; i += kThreads) mx = fmaxf(mx, raw_at(i));
    mx = BlockReduce(mx, MaxF(), sm.red_f);
    double s = 0.0;
    for (int i = tid; i < V; i += kThreads) s += exp(static_cast<double>(raw_at(i)) - static_cast<double>(mx));
    s = BlockReduce(s, SumD(), sm.red_d);
    raw_lse = static_cast<double>(mx) + log(s);
    const int n = min(p.top_logprobs, V);
    if (n > 0) {
      // Per-thread sorted top-n lists, then n rounds of a block max over
      // the list heads.
      uint64_t best[kMaxTopLogprobs];
      int cnt = 0;
      for (int i = tid; i < V; i += kThreads) {
        const uint64_t c = Composite(raw_at(i), i);
        if (cnt == n && c <= best[n - 1]) continue;
        int j = cnt < n ? cnt++ : n - 1;
        while (j > 0 && best[j - 1] < c) {
          best[j] = best[j - 1];
          --j;
        }
        best[j] = c;
      }
      int head = 0;
      for (int k = 0; k < n; ++k) {
        const uint64_t mine = head < cnt ? best[head] : 0;
        const uint64_t win = BlockReduce(mine, MaxU64(), sm.red_u);
        if (mine == win && head < cnt) {
          ++head;
          const int id = CompositeId(win);
          p.top_logprob_ids[static_cast<int64_t>(row) * p.top_logprobs + k] = id;
          p.top_logprob_values[static_cast<int64_t>(row) * p.top_logprobs + k] =
              static_cast<float>(static_cast<double>(raw_at(id)) - raw_lse);
        }
      }
    }
  }

  // Phase 1: penalised logits (history ids are unique within a row).
  for (int i = tid; i < V; i += kThreads) ws[i] = raw_at(i);
  __syncthreads();
  if (p.history_offsets != nullptr) {
    const int b = p.history_offsets[row], e = p.history_offsets[row + 1];
    for (int j = b + tid; j < e; j += kThreads) {
      const int id = p.history_ids[j];
      if (id < 0 || id >= V) continue;
      const bool in_prompt = p.history_prompt_counts[j] > 0;
      const int n_out = p.history_output_counts[j];
      float l = ws[id];
      if (sp.repetition_penalty != 1.0f && (in_prompt || n_out > 0)) {
        l = l > 0.0f ? __fdiv_rn(l, sp.repetition_penalty) : __fmul_rn(l, sp.repetition_penalty);
      }
      if ((sp.frequency_penalty != 0.0f || sp.presence_penalty != 0.0f) && n_out > 0) {
        l = __fsub_rn(l, __fadd_rn(__fmul_rn(sp.frequency_penalty, static_cast<float>(n_out)), sp.presence_penalty));
      }
      ws[id] = l;
    }
  }
  __syncthreads();

  auto finish = [&](int token) {
    if (tid == 0) {
      p.tokens[row] = token;
      if (p.token_logprobs != nullptr) p.token_logprobs[row] = static_cast<float>(static_cast<double>(raw_at(token)) - raw_lse);
    }
  };

  // Phase 2: greedy.
  if (sp.temperature <= 0.0f || sp.top_k == 1) {
    uint64_t best = 0;
    for (int i = tid; i < V; i += kThreads) best = max(best, Composite(ws[i], i));
    best = BlockReduce(best, MaxU64(), sm.red_u);
    finish(CompositeId(best));
    return;
  }

  // Phase 3: temperature, max and the first token of the order.
  float mx = -INFINITY;
  uint64_t c_first = 0;
  for (int i = tid; i < V; i += kThreads) {
    const float x = __fdiv_rn(ws[i], sp.temperature);
    ws[i] = x;
    mx = fmaxf(mx, x);
    c_first = max(c_first, Composite(x, i));
  }
  mx = BlockReduce(mx, MaxF(), sm.red_f);
  c_first = BlockReduce(c_first, MaxU64(), sm.red_u);

  // Phase 4: log-sum-exp in double.
  double s = 0.0;
  for (int i = tid; i < V; i += kThreads) s += exp(static_cast<double>(ws[i]) - static_cast<double>(mx));
  s = BlockReduce(s, SumD(), sm.red_d);
  const double lse = static_cast<double>(mx) + log(s);

  // Phase 5: fixed-point probabilities, sort keys, threshold statistics.
  const bool use_p = sp.top_p < 1.0f;
  const int64_t keep_k = sp.top_k > 0 ? min(sp.top_k, V) : V;
  const bool limit = keep_k < V || use_p;
  float thr[kNumThresholds];
#pragma unroll
  for (int j = 0; j < kNumThresholds; ++j) thr[j] = __fsub_rn(mx, kDelta[j]);
  uint32_t tcnt[kNumThresholds];
  uint64_t tsum[kNumThresholds];
#pragma unroll
  for (int j = 0; j < kNumThresholds; ++j) {
    tcnt[j] = 0;
    tsum[j] = 0;
  }
  for (int i = tid; i < V; i += kThreads) {
    const float x = ws[i];
    const double prob = exp(static_cast<double>(x) - lse);
    const uint64_t fp = prob == 0.0 ? 0 : __double2ull_rn(prob * kFix);
    wp[i] = fp;
    const float key = prob == 0.0 ? -INFINITY : x + 0.0f;
    ws[i] = key;
    if (limit && key >= thr[kNumThresholds - 1]) {
#pragma unroll
      for (int j = 0; j < kNumThresholds; ++j) {
        if (key >= thr[j]) {
          ++tcnt[j];
          tsum[j] += fp;
        }
      }
    }
  }
  if (limit) {
#pragma unroll
    for (int j = 0; j < kNumThresholds; ++j) {
      const uint64_t cj = WarpSumU64(tcnt[j]), sj = WarpSumU64(tsum[j]);
      if (lane == 0) {
        sm.tpart[warp][j] = cj;
        sm.tpart[warp][kNumThresholds + j] = sj;
      }
    }
  }
  __syncthreads();  // also publishes ws / wp of this pass to the whole CTA
  if (limit && tid < 2 * kNumThresholds) {
    uint64_t t = 0;
    for (int w = 0; w < kWarps; ++w) t += sm.tpart[w][tid];
    sm.tstat[tid] = t;
  }
  __syncthreads();

  // Phase 6: composite key of the last kept element (0: keep everything).
  uint64_t cb = 0;
  if (limit) {
    const uint64_t target = use_p ? static_cast<uint64_t>(ceil(static_cast<double>(sp.top_p) * kFix)) : 0;
    int jsel = -1;
    for (int j = 0; j < kNumThresholds; ++j) {
      const uint64_t cnt = sm.tstat[j], mass = sm.tstat[kNumThresholds + j];
      if (cnt <= kCap && (static_cast<int64_t>(cnt) >= keep_k || (use_p && mass >= target))) {
        jsel = j;
        break;
      }
    }
    if (jsel >= 0) {
      // Candidate path: compact {key >= thr}, sort descending, scan.
      if (tid == 0) sm.cand_count = 0;
      __syncthreads();
      const float t = thr[jsel];
      for (int base = 0; base < V; base += kThreads) {
        const int i = base + tid;
        const float key = i < V ? ws[i] : -INFINITY;
        const bool take = i < V && key >= t;
        const uint32_t mask = __ballot_sync(0xffffffffu, take);
        int pos0 = 0;
        if (lane == 0 && mask != 0) pos0 = atomicAdd(&sm.cand_count, __popc(mask));
        pos0 = __shfl_sync(0xffffffffu, pos0, 0);
        if (take) {
          const int pos = pos0 + __popc(mask & ((1u << lane) - 1u));
          sm.cand_c[pos] = Composite(key, i);
          sm.cand_p[pos] = wp[i];
        }
      }
      __syncthreads();
      const int n = sm.cand_count;
      int N = 1;
      while (N < n) N <<= 1;
      for (int i = n + tid; i < N; i += kThreads) {
        sm.cand_c[i] = 0;
        sm.cand_p[i] = 0;
      }
      __syncthreads();
      for (int k = 2; k <= N; k <<= 1) {  // bitonic sort, descending
        for (int j = k >> 1; j > 0; j >>= 1) {
          for (int i = tid; i < N; i += kThreads) {
            const int ixj = i ^ j;
            if (ixj > i) {
              const uint64_t a = sm.cand_c[i], b = sm.cand_c[ixj];
              if ((i & k) == 0 ? a < b : a > b) {
                sm.cand_c[i] = b;
                sm.cand_c[ixj] = a;
                const uint64_t pa = sm.cand_p[i];
                sm.cand_p[i] = sm.cand_p[ixj];
                sm.cand_p[ixj] = pa;
              }
            }
          }
          __syncthreads();
        }
      }
      int64_t kept = keep_k;
      if (use_p) {
        // Inclusive prefix of the sorted masses: thread t owns items [4t, 4t+4).
        uint64_t v[4], local = 0;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int i = 4 * tid + q;
          v[q] = i < N ? sm.cand_p[i] : 0;
          local += v[q];
        }
        uint64_t incl = local;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          const uint64_t up = __shfl_up_sync(0xffffffffu, incl, o);
          if (lane >= o) incl += up;
        }
        if (lane == 31) sm.wsum[warp] = incl;
        __syncthreads();
        uint64_t before = incl - local;
        for (int w = 0; w < warp; ++w) before += sm.wsum[w];
        int first = 1 << 30;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          before += v[q];
          if (4 * tid + q < n && before >= target) first = min(first, 4 * tid + q);
        }
        first = BlockReduce(first, MinI(), sm.red_i);
        if (first < (1 << 30) && first + 1 < kept) kept = first + 1;
      }
      cb = sm.cand_c[kept - 1];
    } else {
      // Fallback: radix descents over the whole row.
      int64_t kept = keep_k;
      uint64_t key = 0;
      int64_t rank = 0;
      bool have_key = false;
      if (use_p && RadixSelect(ws, wp, V, true, target, sm, &key, &rank) && rank + 1 <= kept) {
        kept = rank + 1;
        have_key = true;
      }
      if (!have_key && kept < V) {
        RadixSelect(ws, wp, V, false, static_cast<uint64_t>(kept - 1), sm, &key, &rank);
        have_key = true;
      }
      cb = have_key ? key : 0;
    }
  }

  // Phase 7: min-p. prob_i < floor is decided from x where it is clearly
  // on one side, else by the reference's double compare.
  const bool use_minp = sp.min_p > 0.0f;
  const double floor_p = use_minp ? static_cast<double>(sp.min_p) * exp(static_cast<double>(mx) - lse) : 0.0;
  const double x_floor = use_minp ? log(floor_p) + lse : 0.0;
  const double x_eps = 1e-6 * (1.0 + fabs(x_floor));
  auto is_kept = [&](int i, float key) -> bool {
    const uint64_t c = Composite(key, i);
    if (c == c_first) return true;
    if (c < cb) return false;
    if (!use_minp) return true;
    const double xd = static_cast<double>(key);
    if (xd < x_floor - x_eps) return false;
    if (xd > x_floor + x_eps) return true;
    return !(exp(xd - lse) < floor_p);
  };

  // Phase 8: inverse-CDF walk in id order; warp w owns a contiguous range.
  const int chunk = ((V + kWarps - 1) / kWarps + 31) / 32 * 32;
  const int w0 = warp * chunk, w1 = min(V, w0 + chunk);
  {
    uint64_t sum = 0;
    int last = -1;
    for (int i = w0 + lane; i < w1; i += 32) {
      if (is_kept(i, ws[i])) {
        sum += wp[i];
        last = i;
      }
    }
    sum = WarpSumU64(sum);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) last = max(last, __shfl_xor_sync(0xffffffffu, last, o));
    if (lane == 0) {
      sm.wsum[warp] = sum;
      sm.wlast[warp] = last;
    }
  }
  __syncthreads();
  if (tid == 0) {
    uint64_t total = 0;
    int last = -1;
    for (int w = 0; w < kWarps; ++w) {
      total += sm.wsum[w];
      last = max(last, sm.wlast[w]);
    }
    const double u = CounterUniform(sp.seed, 0, step) * static_cast<double>(total);
    const uint64_t u_fp = static_cast<uint64_t>(u);
    sm.walk_warp = -1;
    sm.token = last;
    uint64_t run = 0;
    for (int w = 0; w < kWarps; ++w) {
      if (u_fp < run + sm.wsum[w]) {
        sm.walk_warp = w;
        sm.walk_base = run;
        break;
      }
      run += sm.wsum[w];
    }
    sm.walk_u = u_fp;
  }
  __syncthreads();
  if (warp == sm.walk_warp) {
    uint64_t base = sm.walk_base;
    const uint64_t u_fp = sm.walk_u;
    for (int seg = w0; seg < w1; seg += 32) {
      const int i = seg + lane;
      const bool k = i < w1 && is_kept(i, ws[i]);
      const uint64_t v = k ? wp[i] : 0;
      uint64_t incl = v;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const uint64_t up = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += up;
      }
      const uint32_t hit = __ballot_sync(0xffffffffu, k && u_fp < base + incl);
      if (hit != 0) {
        if (lane == 0) sm.token = seg + __ffs(hit) - 1;
        break;
      }
      base += __shfl_sync(0xffffffffu, incl, 31);
    }
  }
  __syncthreads();
  finish(sm.token);
}

constexpr absl::string_view kOp = "Sample";

}  // namespace

size_t SampleWorkspaceBytes(int rows, int vocab) {
  if (rows <= 0 || vocab <= 0) return 0;
  const size_t n = static_cast<size_t>(rows) * vocab;
  return (n * sizeof(float) + 15) / 16 * 16 + n * sizeof(uint64_t);
}

absl::Status LaunchSample(const SampleParams& p, cudaStream_t stream) {
  if (p.rows < 0 || p.rows > (1 << 20)) return InvalidParam(kOp, "rows", "out of range");
  if (p.rows == 0) return absl::OkStatus();
  if (p.vocab <= 0 || p.vocab >= (1 << 30)) return InvalidParam(kOp, "vocab", "out of range");
  if (p.logits == nullptr || p.logits_stride < p.vocab) return InvalidParam(kOp, "logits", "null or stride < vocab");
  if (p.params == nullptr) return InvalidParam(kOp, "params", "null");
  if (p.history_offsets != nullptr &&
      (p.history_ids == nullptr || p.history_prompt_counts == nullptr || p.history_output_counts == nullptr)) {
    return InvalidParam(kOp, "history_*", "ids and counts must be set with offsets");
  }
  const size_t need = SampleWorkspaceBytes(p.rows, p.vocab);
  if (p.workspace == nullptr || p.workspace_bytes < need || (reinterpret_cast<uintptr_t>(p.workspace) & 15) != 0) {
    return InvalidParam(kOp, "workspace", absl::StrCat("needs ", need, " bytes, 16-byte aligned"));
  }
  if (p.tokens == nullptr) return InvalidParam(kOp, "tokens", "null");
  if (p.token_mask != nullptr && p.token_mask_stride < (static_cast<int64_t>(p.vocab) + 31) / 32) {
    return InvalidParam(kOp, "token_mask_stride", "must be >= ceil(vocab / 32) words");
  }
  if (p.top_logprobs < 0 || p.top_logprobs > kMaxTopLogprobs) return InvalidParam(kOp, "top_logprobs", "must be in [0, 20]");
  if (p.top_logprobs > 0 && (p.top_logprob_ids == nullptr || p.top_logprob_values == nullptr)) {
    return InvalidParam(kOp, "top_logprob_ids/values", "null while top_logprobs > 0");
  }
  const int smem = static_cast<int>(sizeof(Smem));
  SPAR_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(SampleKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  SampleKernel<<<p.rows, kThreads, smem, stream>>>(p);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("SampleKernel");
  return absl::OkStatus();
}

}  // namespace spar
