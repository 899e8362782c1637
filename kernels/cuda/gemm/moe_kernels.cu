// MoE helper kernels: routing (one warp per token), permutation by expert
// (one block), both in one launch (the last block permutes), weighted
// combine (one block per token).
#include "kernels/cuda/common/arch.cuh"

#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "kernels/cuda/gemm/gemm_launch_internal.h"
#include "kernels/cuda/gemm/moe.h"

namespace spar::gemm::internal {
namespace {

constexpr int kMaxExpertsPerLane = 16;  // num_experts <= 512
constexpr int kRouteWarpsPerBlock = 8;

// Selection order of kernels/ref MoeRoute: allowed group first, then higher
// biased score, then lower expert id.
__device__ __forceinline__ bool Better(bool a_allowed, float a_choice, int a_id, bool b_allowed, float b_choice,
                                       int b_id) {
  if (a_allowed != b_allowed) return a_allowed;
  if (a_choice != b_choice) return a_choice > b_choice;
  return a_id < b_id;
}

// Routes token `tok` with one whole warp.
__device__ __forceinline__ void RouteToken(const MoeRouteParams& p, int64_t tok) {
  const int lane = threadIdx.x & 31;
  // Lane owns experts [lane*per_lane, (lane+1)*per_lane); below 32 experts
  // lanes >= num_experts own none.
  const int per_lane = p.num_experts >= 32 ? p.num_experts / 32 : 1;
  const int group_size = p.num_experts / p.n_group;
  const float* lg = p.logits + tok * p.ld_logits;

  // ---- Phase 1: scores (unbiased, for weights) and choices (biased) -------
  float score[kMaxExpertsPerLane], choice[kMaxExpertsPerLane];
#pragma unroll
  for (int i = 0; i < kMaxExpertsPerLane; ++i) {
    score[i] = 0.0f;
    choice[i] = -INFINITY;
    if (i < per_lane && lane * per_lane + i < p.num_experts) {
      const int e = lane * per_lane + i;
      score[i] = 1.0f / (1.0f + expf(-lg[e]));
      choice[i] = score[i] + p.bias[e];
    }
  }

  // ---- Phase 2: group limit: keep the topk_group groups whose two best
  // biased scores sum highest (ties: lower group first) -------------------
  uint32_t allowed_groups = 0xffffffffu;
  if (p.n_group > 1) {
    float my_gscore = -INFINITY;  // lane g holds group g's score
    for (int grp = 0; grp < p.n_group; ++grp) {
      float b1 = -INFINITY, b2 = -INFINITY;
#pragma unroll
      for (int i = 0; i < kMaxExpertsPerLane; ++i) {
        if (i < per_lane && lane * per_lane + i < p.num_experts && (lane * per_lane + i) / group_size == grp) {
          const float v = choice[i];
          if (v > b1) {
            b2 = b1;
            b1 = v;
          } else if (v > b2) {
            b2 = v;
          }
        }
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {  // top-2 of the union, as a multiset
        const float c1 = __shfl_xor_sync(0xffffffffu, b1, o);
        const float c2 = __shfl_xor_sync(0xffffffffu, b2, o);
        const float n2 = fmaxf(fminf(b1, c1), fmaxf(b2, c2));
        b1 = fmaxf(b1, c1);
        b2 = n2;
      }
      const float gscore = group_size >= 2 ? b1 + b2 : b1;
      if (lane == grp) my_gscore = gscore;
    }
    int rank = 0;
    for (int grp = 0; grp < p.n_group; ++grp) {
      const float v = __shfl_sync(0xffffffffu, my_gscore, grp);
      if (v > my_gscore || (v == my_gscore && grp < lane)) ++rank;
    }
    allowed_groups = __ballot_sync(0xffffffffu, lane < p.n_group && rank < p.topk_group);
  }

  // ---- Phase 3: top_k rounds of a warp arg-max ----------------------------
  uint32_t taken = 0;
  int my_id = -1;        // lane r keeps the r-th choice
  float my_score = 0.0f;
  for (int r = 0; r < p.top_k; ++r) {
    bool ba = false;
    float bc = -INFINITY;
    int bi = INT_MAX;
    float bs = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxExpertsPerLane; ++i) {
      if (i < per_lane && lane * per_lane + i < p.num_experts && !((taken >> i) & 1u)) {
        const int e = lane * per_lane + i;
        const bool al = (allowed_groups >> (e / group_size)) & 1u;
        if (Better(al, choice[i], e, ba, bc, bi)) {
          ba = al;
          bc = choice[i];
          bi = e;
          bs = score[i];
        }
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const bool oa = __shfl_xor_sync(0xffffffffu, static_cast<int>(ba), o) != 0;
      const float oc = __shfl_xor_sync(0xffffffffu, bc, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      const float os = __shfl_xor_sync(0xffffffffu, bs, o);
      if (Better(oa, oc, oi, ba, bc, bi)) {
        ba = oa;
        bc = oc;
        bi = oi;
        bs = os;
      }
    }
    if (lane == r) {
      my_id = bi;
      my_score = bs;
    }
    if (bi / per_lane == lane) taken |= 1u << (bi % per_lane);
  }

  // ---- Phase 4: weights (sum in selection order, as the reference) -------
  float sum = 0.0f;
  for (int i = 0; i < p.top_k; ++i) sum += __shfl_sync(0xffffffffu, my_score, i);
  if (lane < p.top_k) {
    float w = my_score;
    if (p.renormalize) w = w / (sum + 1e-20f);
    p.expert_ids[tok * p.top_k + lane] = my_id;
    p.expert_weights[tok * p.top_k + lane] = w * p.routed_scaling;
  }
}

__global__ void __launch_bounds__(kRouteWarpsPerBlock * 32) MoeRouteKernel(const MoeRouteParams p) {
  const int64_t tok = static_cast<int64_t>(blockIdx.x) * kRouteWarpsPerBlock + (threadIdx.x >> 5);
  if (tok < p.tokens) RouteToken(p, tok);
}

// Counting sort by expert in one block of kT threads: counts (shared
// atomics), exclusive scan (thread i owns experts [i*per, (i+1)*per)),
// scatter through per-expert cursors. cnt and cursor: n_local ints each of
// shared memory; warp_sums: 32. expert_ids are read through L2 (__ldcg):
// in the fused kernel other blocks wrote them during this launch.
template <int kT>
__device__ __forceinline__ void PermuteBlock(const MoePermuteParams& p, int* cnt, int* cursor, int* warp_sums) {
  const int n_local = p.expert_end - p.expert_begin;
  const int tid = threadIdx.x;
  const int lane = tid & 31, warp = tid >> 5;
  const int64_t n = p.tokens * p.top_k;
  for (int e = tid; e < n_local; e += kT) cnt[e] = 0;
  __syncthreads();
  for (int64_t i = tid; i < n; i += kT) {
    const int e = __ldcg(p.expert_ids + i) - p.expert_begin;
    if (e >= 0 && e < n_local) atomicAdd(&cnt[e], 1);
  }
  __syncthreads();
  const int per = (n_local + kT - 1) / kT;
  const int e0 = min(tid * per, n_local), e1 = min(e0 + per, n_local);
  int v = 0;
  for (int e = e0; e < e1; ++e) v += cnt[e];
  int incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int u = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += u;
  }
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    int s = lane < kT / 32 ? warp_sums[lane] : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int u = __shfl_up_sync(0xffffffffu, s, o);
      if (lane >= o) s += u;
    }
    warp_sums[lane] = s;
  }
  __syncthreads();
  int excl = (warp > 0 ? warp_sums[warp - 1] : 0) + incl - v;
  for (int e = e0; e < e1; ++e) {
    p.expert_offsets[e] = excl;
    cursor[e] = excl;
    excl += cnt[e];
  }
  if (e1 == n_local && e0 < e1) p.expert_offsets[n_local] = excl;
  __syncthreads();
  for (int64_t i = tid; i < n; i += kT) {
    const int e = __ldcg(p.expert_ids + i) - p.expert_begin;
    int pos = -1;
    if (e >= 0 && e < n_local) {
      pos = atomicAdd(&cursor[e], 1);
      p.sorted_token[pos] = static_cast<int32_t>(i / p.top_k);
    }
    p.slot[i] = pos;
  }
}

__global__ void __launch_bounds__(1024) MoePermuteKernel(const MoePermuteParams p) {
  extern __shared__ int s_mem[];
  __shared__ int warp_sums[32];
  const int n_local = p.expert_end - p.expert_begin;
  PermuteBlock<1024>(p, s_mem, s_mem + n_local, warp_sums);
}

// Routing and permutation in one launch (decode: two dependent kernels of a
// few microseconds each become one): every block routes its tokens, and the
// last block to finish (a device counter, reset by that block for the next
// launch) permutes all of them.
constexpr int kFusedThreads = kRouteWarpsPerBlock * 32;

__global__ void __launch_bounds__(kFusedThreads) MoeRoutePermuteKernel(const MoeRouteParams r, const MoePermuteParams q,
                                                                       int32_t* done) {
  extern __shared__ int s_mem[];
  __shared__ int warp_sums[32];
  __shared__ bool is_last;
  const int64_t tok = static_cast<int64_t>(blockIdx.x) * kRouteWarpsPerBlock + (threadIdx.x >> 5);
  if (tok < r.tokens) RouteToken(r, tok);
  __threadfence();  // this block's ids and weights before its arrival
  __syncthreads();
  if (threadIdx.x == 0) is_last = atomicAdd(done, 1) == static_cast<int32_t>(gridDim.x) - 1;
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  const int n_local = q.expert_end - q.expert_begin;
  PermuteBlock<kFusedThreads>(q, s_mem, s_mem + n_local, warp_sums);
  if (threadIdx.x == 0) *done = 0;
}

__device__ __forceinline__ void AddBf16x8(float (&acc)[8], const __nv_bfloat16* src, float w) {
  const uint4 raw = *reinterpret_cast<const uint4*>(src);
  const uint32_t r[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    acc[2 * e] += w * __uint_as_float(r[e] << 16);
    acc[2 * e + 1] += w * __uint_as_float(r[e] & 0xffff0000u);
  }
}

// Block (t, c) combines token t's hidden columns [c * kCombineCols, ...):
// at decode batch sizes one block per token would walk the whole hidden
// size serially (~10 us for GLM-5's 6144 at batch 1).
constexpr int kCombineThreads = 128;
constexpr int kCombineCols = kCombineThreads * 8;

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
  for (int64_t d = static_cast<int64_t>(blockIdx.y) * kCombineCols + threadIdx.x * 8; d < col_end;
       d += blockDim.x * 8) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int j = 0; j < p.top_k; ++j) {
      const int s = s_slot[j];
      if (s >= 0) AddBf16x8(acc, p.expert_out + s * p.ld_expert + d, s_w[j]);
    }
    if (p.shared != nullptr) AddBf16x8(acc, p.shared + t * p.ld_shared + d, 1.0f);
    if (p.residual != nullptr) AddBf16x8(acc, p.residual + t * p.ld_residual + d, 1.0f);
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
  const int64_t blocks = (p.tokens + kRouteWarpsPerBlock - 1) / kRouteWarpsPerBlock;
  MoeRouteKernel<<<static_cast<unsigned>(blocks), kRouteWarpsPerBlock * 32, 0, stream>>>(p);
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
  const int64_t blocks = std::max<int64_t>(1, (r.tokens + kRouteWarpsPerBlock - 1) / kRouteWarpsPerBlock);
  MoeRoutePermuteKernel<<<static_cast<unsigned>(blocks), kFusedThreads, 2 * n_local * sizeof(int), stream>>>(r, q,
                                                                                                             done);
  return cudaGetLastError();
}

cudaError_t LaunchMoeCombineKernel(const MoeCombineParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.tokens), static_cast<unsigned>((p.hidden + kCombineCols - 1) / kCombineCols));
  MoeCombineKernel<<<grid, kCombineThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace spar::gemm::internal
