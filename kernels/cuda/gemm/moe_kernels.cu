// MoE helper kernels: routing (one block per token), permutation by expert
// (one block), both in one launch (the last block permutes), the router's
// GEMV with both for one token, weighted combine (blocks of tokens x hidden
// columns).
#include "kernels/cuda/common/arch.cuh"
#include "kernels/cuda/common/grid_arrival.cuh"
#include "kernels/cuda/common/reduce.cuh"

#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "kernels/cuda/gemm/gemm_launch_internal.h"
#include "kernels/cuda/gemm/moe.h"

namespace spar::gemm::internal {
namespace {

constexpr int kRouteThreads = 256;
constexpr int kMaxRouteExperts = 512;  // LaunchMoeRoute's bound
constexpr int kMaxRouteGroups = 32;
constexpr int kMaxRouteTopK = 32;

constexpr int kRouteSegment = 32;  // experts a warp ranks among themselves: one a lane
constexpr int kMaxRouteSegments = kMaxRouteExperts / kRouteSegment;
constexpr int kRouteExpertsPerThread = kMaxRouteExperts / kRouteThreads;
static_assert(kRouteThreads % kRouteSegment == 0 && kMaxRouteExperts % kRouteThreads == 0, "whole segments");

struct RouteSmem {
  float choice[kMaxRouteExperts];  // score + bias, for the group scores
  float group_score[kMaxRouteGroups];
  // Each segment's top_k keys, best first (RouteTokenBlock).
  unsigned long long candidate[kMaxRouteSegments][kMaxRouteTopK];
  float selected_score[kMaxRouteTopK];
  int selected_id[kMaxRouteTopK];  // the global expert ids in selection order
  uint32_t allowed_groups;
};

// kernels/ref MoeRoute's selection order as one 64-bit key, larger first:
// allowed groups first, then the higher biased score, then the lower expert
// id. The score's bits are made monotonic (-0 as +0, so equal scores tie as
// the reference's float compare does); a lane past the last expert gets a
// key below every expert's (and distinct from the other such lanes').
__device__ __forceinline__ unsigned long long ExpertKey(bool allowed, float choice, int e) {
  uint32_t u = __float_as_uint(choice);
  if ((u << 1) == 0) u = 0;
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<unsigned long long>(allowed) << 48) | (static_cast<unsigned long long>(u) << 16) |
         static_cast<unsigned long long>(0xffff - e);
}

// Routes token `tok` with the whole block (kRouteThreads threads), in the
// selection order of kernels/ref MoeRoute. Each warp ranks a segment of 32
// experts by counting the keys above each (a shuffle each); a segment's
// top_k are its candidates, and a candidate's place is its rank plus the
// other segments' candidates above it: an expert among the top_k has fewer
// than top_k experts above it in every segment, so all of them are
// candidates there and the count is exact; any other expert counts at least
// top_k. (Every thread counting all 256 experts from shared memory, as
// before, was ~1.5 us of dependent loads at GLM-5's 256 experts.)
__device__ __forceinline__ void RouteTokenBlock(const MoeRouteParams& p, int64_t tok, RouteSmem& s) {
  const int tid = threadIdx.x, warp = tid >> 5;
  const int num_experts = p.num_experts, group_size = p.num_experts / p.n_group;
  const float* lg = p.logits + tok * p.ld_logits;
  // Thread tid holds experts tid, tid + kRouteThreads: segment warp + 8 i, lane.
  float score[kRouteExpertsPerThread] = {}, choice[kRouteExpertsPerThread] = {};
#pragma unroll
  for (int i = 0; i < kRouteExpertsPerThread; ++i) {
    const int e = tid + i * kRouteThreads;
    if (e >= num_experts) break;
    // The bias is loaded first so both loads are in flight at once (after
    // the logit's strong load the compiler kept it behind the sigmoid).
    const float bias = p.bias[e];
    // Through L2: in MoeRouterRoutePermuteKernel other blocks wrote them.
    score[i] = 1.0f / (1.0f + expf(-__ldcg(lg + e)));
    const float c = score[i] + bias;
    // NaN (a NaN hidden state) ranks last, so the places stay a permutation.
    choice[i] = c == c ? c : -INFINITY;
    if (p.n_group > 1) s.choice[e] = choice[i];
  }
  // Group limit: keep the topk_group groups whose two best biased scores
  // sum highest (ties: the lower group).
  uint32_t allowed_groups = 0xffffffffu;
  if (p.n_group > 1) {
    __syncthreads();
    if (tid < p.n_group) {
      float b1 = -INFINITY, b2 = -INFINITY;
      for (int i = 0; i < group_size; ++i) {
        const float v = s.choice[tid * group_size + i];
        if (v > b1) {
          b2 = b1;
          b1 = v;
        } else if (v > b2) {
          b2 = v;
        }
      }
      s.group_score[tid] = group_size >= 2 ? b1 + b2 : b1;
    }
    __syncthreads();
    bool allowed = false;
    if (tid < p.n_group) {
      const float mine = s.group_score[tid];
      int rank = 0;
      for (int g = 0; g < p.n_group; ++g) {
        const float v = s.group_score[g];
        rank += v > mine || (v == mine && g < tid);
      }
      allowed = rank < p.topk_group;
    }
    const uint32_t ballot = __ballot_sync(0xffffffffu, allowed);  // n_group <= 32: warp 0 holds them all
    if (tid == 0) s.allowed_groups = ballot;
    __syncthreads();
    allowed_groups = s.allowed_groups;
  }
  const int segments = (num_experts + kRouteSegment - 1) / kRouteSegment;
  unsigned long long key[kRouteExpertsPerThread] = {};
  int rank[kRouteExpertsPerThread];
#pragma unroll
  for (int i = 0; i < kRouteExpertsPerThread; ++i) {
    const int seg = warp + i * (kRouteThreads / kRouteSegment), e = tid + i * kRouteThreads;
    rank[i] = kMaxRouteTopK;
    if (seg >= segments) break;  // the whole warp
    key[i] = e < num_experts ? ExpertKey((allowed_groups >> (e / group_size)) & 1u, choice[i], e)
                             : static_cast<unsigned long long>(0xffff - e);
    int r = 0;
#pragma unroll
    for (int j = 0; j < kRouteSegment; ++j) r += __shfl_sync(0xffffffffu, key[i], j) > key[i];
    rank[i] = r;
    if (r < p.top_k) s.candidate[seg][r] = key[i];
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kRouteExpertsPerThread; ++i) {
    const int seg = warp + i * (kRouteThreads / kRouteSegment), e = tid + i * kRouteThreads;
    if (rank[i] >= p.top_k || e >= num_experts) continue;
    int place = rank[i];
    for (int other = 0; other < segments; ++other) {
      if (other == seg) continue;
      for (int r = 0; r < p.top_k; ++r) place += s.candidate[other][r] > key[i];
    }
    if (place < p.top_k) {
      p.expert_ids[tok * p.top_k + place] = e;
      s.selected_score[place] = score[i];
      s.selected_id[place] = e;
    }
  }
  __syncthreads();
  // Weights: the sum in selection order, as the reference.
  if (tid < p.top_k) {
    float sum = 0.0f;
    for (int i = 0; i < p.top_k; ++i) sum += s.selected_score[i];
    float w = s.selected_score[tid];
    if (p.renormalize) w = w / (sum + 1e-20f);
    p.expert_weights[tok * p.top_k + tid] = w * p.routed_scaling;
  }
}

// One block per token.
__global__ void __launch_bounds__(kRouteThreads) MoeRouteKernel(const MoeRouteParams p) {
  __shared__ RouteSmem s;
  RouteTokenBlock(p, blockIdx.x, s);
}

// Counting sort by expert in one block of kT threads: counts (shared
// atomics), one exclusive scan of the rows and the work lists' entries
// (thread i owns experts [i*per, (i+1)*per)), the grouped GEMMs' work lists
// when asked for, scatter. cnt and first_row: n_local ints each of shared
// memory, cnt zero on entry (ClearPermuteCounts, then a barrier: the fused
// kernel clears before its arrival, off the last block's chain);
// scan_scratch: kPermuteScanScratch. expert_ids are read through L2
// (__ldcg): in the fused kernel other blocks wrote them during this launch.
// Up to kT x kPermuteIdsHeld pairs (decode batches) they are read once and
// held in registers with each pair's place among its expert's rows (what
// the counting atomic returned), so the scatter needs no second L2 round
// trip and no second atomic. Beyond that (prefill) the ids are read again
// and placed through per-expert cursors. Indices are 32-bit (tokens * top_k
// < 2^31): this block is a chain of dependent steps, and a 64-bit division
// is a ~70-instruction subroutine on it.
constexpr int kPermuteIdsHeld = 4;
constexpr int kPermuteScanScratch = 32 * (1 + kMaxPermuteWorkLists);

// Probe hook: tools/device/probes/route_probe.cu defines it to time the
// block's steps (thread 0: at entry, after the counts, before and after the
// scan, after the first rows, at the end); nothing in the build.
#ifndef SPAR_PERMUTE_STEP
#define SPAR_PERMUTE_STEP(n)
#endif

template <int kT>
__device__ __forceinline__ void ClearPermuteCounts(const MoePermuteParams& p, int* cnt) {
  for (int e = threadIdx.x; e < p.expert_end - p.expert_begin; e += kT) cnt[e] = 0;
}

// kDecode: n_local <= kT and at most kT x kPermuteIdsHeld pairs (the caller
// checks), so thread i owns expert i alone, the ids are held, and the block
// is straight code without the prefill path's loops. The last block runs it
// once a launch on an SM whose instruction cache has not seen it, so its
// length is latency too: 452 instructions from the arrival instead of 1,205
// took 8-64-token launches from 6.3 to 5.8 us (bench/RESULTS.md, session 40).
template <int kT, bool kDecode = false>
__device__ __forceinline__ void PermuteBlock(const MoePermuteParams& p, int* cnt, int* first_row, int* scan_scratch) {
  const int n_local = p.expert_end - p.expert_begin;
  const int tid = threadIdx.x;
  const int n = static_cast<int>(p.tokens) * p.top_k;
  const unsigned top_k = static_cast<unsigned>(p.top_k);
  const bool held = kDecode || n <= kT * kPermuteIdsHeld;
  auto mine = [&](int e) { return e >= 0 && e < n_local; };
  int local[kPermuteIdsHeld];  // pair tid + k kT's local expert (out of range: not this rank's)
  int place[kPermuteIdsHeld];  // its place among the expert's rows
  SPAR_PERMUTE_STEP(0);
  if (held) {
#pragma unroll
    for (int k = 0; k < kPermuteIdsHeld; ++k) {
      const int i = tid + k * kT;
      local[k] = i < n ? __ldcg(p.expert_ids + i) - p.expert_begin : -1;
    }
#pragma unroll
    for (int k = 0; k < kPermuteIdsHeld; ++k) place[k] = mine(local[k]) ? atomicAdd(&cnt[local[k]], 1) : -1;
  } else {
    for (int64_t i = tid; i < n; i += kT) {  // 64-bit: i + kT may pass 2^31
      const int e = __ldcg(p.expert_ids + i) - p.expert_begin;
      if (mine(e)) atomicAdd(&cnt[e], 1);
    }
  }
  __syncthreads();
  SPAR_PERMUTE_STEP(1);
  const int per = (n_local + kT - 1) / kT;
  const int e0 = min(tid * per, n_local), e1 = min(e0 + per, n_local);
  // Visits this thread's experts in order (decode: expert tid, if any).
  auto for_my_experts = [&](auto&& visit) {
    if constexpr (kDecode) {
      if (tid < n_local) visit(tid);
    } else {
      for (int e = e0; e < e1; ++e) visit(e);
    }
  };
  // This thread's experts' rows and each work list's entries (tiles of
  // work_block_tokens rows), scanned together: one block scan for all.
  constexpr int kFields = 1 + kMaxPermuteWorkLists;
  int first[kFields] = {}, totals[kFields];
  for_my_experts([&](int e) {
    const unsigned c = cnt[e];
    first[0] += c;
#pragma unroll
    for (int l = 0; l < kMaxPermuteWorkLists; ++l) {
      const unsigned bt = p.work_block_tokens[l];
      if (l < p.num_work_lists) first[1 + l] += (c + bt - 1) / bt;
    }
  });
  SPAR_PERMUTE_STEP(2);
  cuda::BlockExclusiveScanFields<kT, kFields>(first, scan_scratch, totals);
  SPAR_PERMUTE_STEP(3);
  int row = first[0];
  for_my_experts([&](int e) {
    first_row[e] = row;
    row += cnt[e];
  });
  __syncthreads();  // first_row, for the scatter
  SPAR_PERMUTE_STEP(4);
  // The global writes come after the last barrier, so no barrier waits for
  // them. The rows again from registers: without held ids first_row turns
  // into cursors below, under other threads' atomics.
  row = first[0];
  for_my_experts([&](int e) {
    p.expert_offsets[e] = row;
    row += cnt[e];
  });
  if (tid == 0) p.expert_offsets[n_local] = totals[0];
  // Work lists (MoePermuteParams::work): [0] the entry count, entries of
  // (local expert, first row, rows, 0) from byte 16, in expert order.
#pragma unroll
  for (int l = 0; l < kMaxPermuteWorkLists; ++l) {
    if (l >= p.num_work_lists) break;
    const int bt = p.work_block_tokens[l];
    int32_t* list = static_cast<int32_t*>(p.work[l]);
    int4* entries = reinterpret_cast<int4*>(list + 4);
    int at = first[1 + l];
    row = first[0];
    for_my_experts([&](int e) {
      const int c = cnt[e];
      for (int r0 = 0; r0 < c; r0 += bt) entries[at++] = make_int4(e, row + r0, min(bt, c - r0), 0);
      row += c;
    });
    if (tid == 0) list[0] = totals[1 + l];
  }
  if (held) {
#pragma unroll
    for (int k = 0; k < kPermuteIdsHeld; ++k) {
      const int i = tid + k * kT;
      if (i >= n) continue;
      int pos = -1;
      if (place[k] >= 0) {
        pos = first_row[local[k]] + place[k];
        p.sorted_token[pos] = static_cast<int32_t>(static_cast<unsigned>(i) / top_k);
      }
      p.slot[i] = pos;
    }
  } else {
    // first_row becomes each expert's cursor.
    for (int64_t i = tid; i < n; i += kT) {
      const int e = __ldcg(p.expert_ids + i) - p.expert_begin;
      int pos = -1;
      if (mine(e)) {
        pos = atomicAdd(&first_row[e], 1);
        p.sorted_token[pos] = static_cast<int32_t>(static_cast<unsigned>(i) / top_k);
      }
      p.slot[i] = pos;
    }
  }
  SPAR_PERMUTE_STEP(5);
}

// The permutation of one token's top_k distinct experts (ids: global, in
// selection order, in shared memory), by the block that routed it: an
// expert's offset is the number of this rank's selected experts below it,
// so no counts, scans or cursors are needed, and each hit expert holds one
// row (one work-list entry per hit, in expert order). The same outputs as
// PermuteBlock for one token (its rows within an expert: only one).
template <int kT>
__device__ __forceinline__ void PermuteOneToken(const MoePermuteParams& p, const int* ids) {
  const int n_local = p.expert_end - p.expert_begin;
  const int k = p.top_k;
  for (int e = threadIdx.x; e <= n_local; e += kT) {
    int below = 0;
    bool hit = false;
    for (int i = 0; i < k; ++i) {
      const int l = ids[i] - p.expert_begin;
      below += l >= 0 && l < e;
      hit |= l == e;
    }
    p.expert_offsets[e] = below;
    // Lists indexed by constants: a runtime index into the parameters'
    // arrays makes the compiler copy them all to local memory in every
    // thread of the launch.
#pragma unroll
    for (int w = 0; w < kMaxPermuteWorkLists; ++w) {
      if (w >= p.num_work_lists) break;
      if (hit && e < n_local) {
        reinterpret_cast<int4*>(static_cast<int32_t*>(p.work[w]) + 4)[below] = make_int4(e, below, 1, 0);
      }
      if (e == n_local) static_cast<int32_t*>(p.work[w])[0] = below;  // this rank's rows = the entries
    }
  }
  for (int i = threadIdx.x; i < k; i += kT) {
    const int l = ids[i] - p.expert_begin;
    int pos = -1;
    if (l >= 0 && l < n_local) {
      pos = 0;
      for (int j = 0; j < k; ++j) {
        const int m = ids[j] - p.expert_begin;
        pos += m >= 0 && m < l;
      }
      p.sorted_token[pos] = 0;
    }
    p.slot[i] = pos;
  }
}

__global__ void __launch_bounds__(1024) MoePermuteKernel(const MoePermuteParams p) {
  extern __shared__ int s_mem[];
  __shared__ int scan_scratch[kPermuteScanScratch];
  const int n_local = p.expert_end - p.expert_begin;
  ClearPermuteCounts<1024>(p, s_mem);
  __syncthreads();
  PermuteBlock<1024>(p, s_mem, s_mem + n_local, scan_scratch);
}

// Routing and permutation in one launch (decode: two dependent kernels of a
// few microseconds each become one): block t routes token t, and the last
// block to finish (a device counter, reset by that block for the next
// launch) permutes all of them. One token: its block permutes it directly
// (PermuteOneToken), without the counter.
__global__ void __launch_bounds__(kRouteThreads) MoeRoutePermuteKernel(const MoeRouteParams r, const MoePermuteParams q,
                                                                      int32_t* done) {
  extern __shared__ int s_mem[];
  __shared__ RouteSmem route_smem;
  __shared__ int scan_scratch[kPermuteScanScratch];
  __shared__ int is_last;
  if (r.tokens == 1) {  // decode at batch 1: nothing to wait for, no scans to run
    RouteTokenBlock(r, 0, route_smem);  // ends after a barrier that follows the selection
    PermuteOneToken<kRouteThreads>(q, route_smem.selected_id);
    return;
  }
  if (static_cast<int64_t>(blockIdx.x) < r.tokens) RouteTokenBlock(r, blockIdx.x, route_smem);
  ClearPermuteCounts<kRouteThreads>(q, s_mem);  // every block: which one is last is not known yet
  // This block's ids and weights published; the last block sees them all.
  if (!cuda::ArriveIsLast(done, static_cast<int32_t>(gridDim.x), is_last)) return;
  const int n_local = q.expert_end - q.expert_begin;
  if (n_local <= kRouteThreads && r.tokens * r.top_k <= kRouteThreads * kPermuteIdsHeld) {
    PermuteBlock<kRouteThreads, true>(q, s_mem, s_mem + n_local, scan_scratch);
  } else {
    PermuteBlock<kRouteThreads>(q, s_mem, s_mem + n_local, scan_scratch);
  }
  if (threadIdx.x == 0) *done = 0;
}

// The router's GEMV for one token, then routing and permutation: block b
// computes the logits of experts 2b and 2b + 1 (four warps each, a quarter
// of the 16-byte vectors of the row each, interleaved so every warp load is
// 512 contiguous bytes), then the last block to arrive routes and permutes
// the token (RouteTokenBlock, PermuteOneToken) and resets the counter. Each
// logit is summed in a fixed order (per lane, then a butterfly over the
// warp, then the four warps in order): the bits do not depend on timing.
constexpr int kRouterExpertsPerBlock = 2;
constexpr int kRouterWarpsPerExpert = kRouteThreads / 32 / kRouterExpertsPerBlock;
constexpr int kRouterBatch = 8;  // 16-byte vectors of weights a lane has in flight

__device__ __forceinline__ float DotBf16x8(const uint4& a, const uint4& b) {
  const uint32_t ra[4] = {a.x, a.y, a.z, a.w}, rb[4] = {b.x, b.y, b.z, b.w};
  float s = 0.0f;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    s = fmaf(__uint_as_float(ra[e] << 16), __uint_as_float(rb[e] << 16), s);
    s = fmaf(__uint_as_float(ra[e] & 0xffff0000u), __uint_as_float(rb[e] & 0xffff0000u), s);
  }
  return s;
}

__global__ void __launch_bounds__(kRouteThreads) MoeRouterRoutePermuteKernel(const MoeRouterParams g,
                                                                            const MoeRouteParams r,
                                                                            const MoePermuteParams q, int32_t* done) {
  __shared__ RouteSmem route_smem;
  __shared__ float partial[kRouterExpertsPerBlock][kRouterWarpsPerExpert];
  __shared__ int is_last;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int local = warp / kRouterWarpsPerExpert, quarter = warp % kRouterWarpsPerExpert;
  const int e = blockIdx.x * kRouterExpertsPerBlock + local;
  float acc = 0.0f;
  if (e < r.num_experts) {
    const uint4* w = reinterpret_cast<const uint4*>(g.weight + static_cast<int64_t>(e) * g.ld);
    const uint4* x = reinterpret_cast<const uint4*>(g.x);
    const int vecs = static_cast<int>(g.hidden / 8);
    constexpr int kStride = kRouterWarpsPerExpert * 32;
    for (int v0 = quarter * 32 + lane; v0 < vecs; v0 += kRouterBatch * kStride) {
      // All loads first, the activations' too: one memory latency per batch.
      // (Loaded beside their products, the activation loads each waited for
      // the previous product: six L2 round trips in a row at GLM-5's hidden
      // size, on the one-token step's critical path.)
      uint4 wv[kRouterBatch], xv[kRouterBatch];
#pragma unroll
      for (int i = 0; i < kRouterBatch; ++i) {
        const int v = v0 + i * kStride;
        wv[i] = v < vecs ? __ldg(w + v) : make_uint4(0, 0, 0, 0);
        xv[i] = v < vecs ? __ldg(x + v) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int i = 0; i < kRouterBatch; ++i) {
        if (v0 + i * kStride < vecs) acc += DotBf16x8(wv[i], xv[i]);
      }
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) partial[local][quarter] = acc;
  __syncthreads();
  if (tid < kRouterExpertsPerBlock) {
    const int ex = blockIdx.x * kRouterExpertsPerBlock + tid;
    float s = 0.0f;
    for (int i = 0; i < kRouterWarpsPerExpert; ++i) s += partial[tid][i];
    if (ex < r.num_experts) g.logits[ex] = s;
  }
  // This block's logits published; the last block sees them all.
  if (!cuda::ArriveIsLast(done, static_cast<int32_t>(gridDim.x), is_last)) return;
  RouteTokenBlock(r, 0, route_smem);  // ends after a barrier that follows the selection
  PermuteOneToken<kRouteThreads>(q, route_smem.selected_id);
  if (tid == 0) *done = 0;
}

// Block (t, c) combines token t's hidden columns [c * kCombineCols, ...):
// at decode batch sizes one block per token would walk the whole hidden
// size serially (~10 us for GLM-5's 6144 at batch 1).
constexpr int kCombineThreads = 128;
constexpr int kCombineCols = kCombineThreads * 8;
// Expert rows a thread has in flight before it sums them. Loaded beside
// their sums, each row's load waited for the previous row's adds (the
// compiler keeps a load behind the FFMAs before it): at one token that was
// ten L2 round trips in a row, top_k experts + shared + residual.
constexpr int kCombineRowsInFlight = 8;

__device__ __forceinline__ void AddBf16x8(float (&acc)[8], const uint4& raw, float w) {
  const uint32_t r[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    acc[2 * e] += w * __uint_as_float(r[e] << 16);
    acc[2 * e + 1] += w * __uint_as_float(r[e] & 0xffff0000u);
  }
}

__device__ __forceinline__ uint4 LoadBf16x8(const __nv_bfloat16* src) { return *reinterpret_cast<const uint4*>(src); }

__global__ void __launch_bounds__(kCombineThreads) MoeCombineKernel(const MoeCombineParams p) {
  __shared__ int s_slot[32];
  __shared__ float s_w[32];
  const int64_t t = blockIdx.x;
  const int64_t col_end = min(p.hidden, static_cast<int64_t>(blockIdx.y + 1) * kCombineCols);
  if (threadIdx.x < p.top_k) {
    s_slot[threadIdx.x] = p.slot[t * p.top_k + threadIdx.x];
    s_w[threadIdx.x] = p.weights[t * p.top_k + threadIdx.x];
  }
  __syncthreads();
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int64_t d = static_cast<int64_t>(blockIdx.y) * kCombineCols + threadIdx.x * 8; d < col_end;
       d += blockDim.x * 8) {
    // Every load of this chunk is issued before the first add; the sum
    // runs in the reference's order (experts j = 0.., shared, residual).
    const uint4 shared = p.shared != nullptr ? LoadBf16x8(p.shared + t * p.ld_shared + d) : zero;
    const uint4 residual = p.residual != nullptr ? LoadBf16x8(p.residual + t * p.ld_residual + d) : zero;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int j0 = 0; j0 < p.top_k; j0 += kCombineRowsInFlight) {
      uint4 rows[kCombineRowsInFlight];
#pragma unroll
      for (int i = 0; i < kCombineRowsInFlight; ++i) {
        const int j = j0 + i;
        const int s = j < p.top_k ? s_slot[j] : -1;
        rows[i] = s >= 0 ? LoadBf16x8(p.expert_out + s * p.ld_expert + d) : zero;
      }
#pragma unroll
      for (int i = 0; i < kCombineRowsInFlight; ++i) {
        const int j = j0 + i;
        if (j < p.top_k && s_slot[j] >= 0) AddBf16x8(acc, rows[i], s_w[j]);
      }
    }
    if (p.shared != nullptr) AddBf16x8(acc, shared, 1.0f);
    if (p.residual != nullptr) AddBf16x8(acc, residual, 1.0f);
    if (p.out_f32 != nullptr) {
      float4* dst = reinterpret_cast<float4*>(p.out_f32 + t * p.ld_out + d);
      dst[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
      dst[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
      continue;
    }
    uint32_t packed[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const __nv_bfloat162 h = __floats2bfloat162_rn(acc[2 * e], acc[2 * e + 1]);
      packed[e] = *reinterpret_cast<const uint32_t*>(&h);
    }
    *reinterpret_cast<uint4*>(p.out + t * p.ld_out + d) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }
}

}  // namespace

cudaError_t LaunchMoeRouteKernel(const MoeRouteParams& p, cudaStream_t stream) {
  if (p.tokens > INT32_MAX) return cudaErrorInvalidValue;
  MoeRouteKernel<<<static_cast<unsigned>(p.tokens), kRouteThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t LaunchMoePermuteKernel(const MoePermuteParams& p, cudaStream_t stream) {
  const int n_local = p.expert_end - p.expert_begin;
  MoePermuteKernel<<<1, 1024, 2 * n_local * sizeof(int), stream>>>(p);
  return cudaGetLastError();
}

cudaError_t LaunchMoeRoutePermuteKernel(const MoeRouteParams& r, const MoePermuteParams& q, int32_t* done,
                                        cudaStream_t stream) {
  const int n_local = q.expert_end - q.expert_begin;
  if (r.tokens > INT32_MAX) return cudaErrorInvalidValue;
  const int64_t blocks = std::max<int64_t>(1, r.tokens);
  MoeRoutePermuteKernel<<<static_cast<unsigned>(blocks), kRouteThreads, 2 * n_local * sizeof(int), stream>>>(r, q,
                                                                                                             done);
  return cudaGetLastError();
}

cudaError_t LaunchMoeRouterRoutePermuteKernel(const MoeRouterParams& g, const MoeRouteParams& r,
                                              const MoePermuteParams& q, int32_t* done, cudaStream_t stream) {
  const int blocks = (r.num_experts + kRouterExpertsPerBlock - 1) / kRouterExpertsPerBlock;
  MoeRouterRoutePermuteKernel<<<blocks, kRouteThreads, 0, stream>>>(g, r, q, done);
  return cudaGetLastError();
}

cudaError_t LaunchMoeCombineKernel(const MoeCombineParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.tokens), static_cast<unsigned>((p.hidden + kCombineCols - 1) / kCombineCols));
  MoeCombineKernel<<<grid, kCombineThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace spar::gemm::internal
