#include "kernels/cuda/common/arch.cuh"
// The split-K merge of the sparse MLA kernels: a CTA per (token, head) sums
// the splits' partial rows, weighted by their log-sum-exps.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention/sparse_mla_args.cuh"
#include "kernels/cuda/attention/sparse_mla_config.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/reduce.cuh"

namespace spar::mla {
namespace {

// Merges the splits of one (token, head): weights exp(lse_s - max), the
// partial rows summed in split order. kCols output columns per thread: at
// decode (few rows, <= 32 splits) one column per thread, and all of the
// first 32 splits' partial values are loaded before the weights are known,
// so the kernel waits for memory once (it sits between attention and the
// un-absorption on the step's critical path); many rows take 4 columns per
// thread (fewer, larger CTAs). Both sum in the same order (the weights'
// total sequentially over the splits, then each column), so the variant
// does not change a bit. Every split empty -> out 0, lse +inf. The merged
// un-absorption (absorb_gemm.cu, MergeRowsIntoA) repeats this arithmetic
// exactly; absorb_gemm_gpu_test checks the two agree bit for bit.
constexpr int kMergeLoads = 32;          // partial values in flight per thread
constexpr int kMergeFewRows = 1024;      // up to this many (token, head) rows: one column per thread

template <int kCols>
__global__ void __launch_bounds__(kDimV / kCols) MergeSplitsKernel(const float* __restrict__ ws_o,
                                                                   const float* __restrict__ ws_lse, int splits,
                                                                   int tokens, int heads, __nv_bfloat16* out,
                                                                   int64_t o_ts, int64_t o_hs, float* lse) {
  constexpr int kThreadsPerRow = kDimV / kCols;
  constexpr int kWarps = kThreadsPerRow / 32;
  constexpr int kBatch = kMergeLoads / kCols;  // splits per round of loads
  __shared__ float sw[kMaxSplits];
  __shared__ float smax[kWarps];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t th = blockIdx.x;
  const int t = static_cast<int>(th / heads), h = static_cast<int>(th % heads);
  const int64_t stride = static_cast<int64_t>(tokens) * heads;
  const float* src = ws_o + th * kDimV + tid * kCols;
  const int64_t split_stride = stride * kDimV;
  float v[kBatch][kCols];
  auto load = [&](int s0) {
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
#pragma unroll
      for (int c = 0; c < kCols; ++c) v[i][c] = 0.0f;
      if (s0 + i < splits) {
        if constexpr (kCols == 4) {
          const float4 x = *reinterpret_cast<const float4*>(src + (s0 + i) * split_stride);
          v[i][0] = x.x, v[i][1] = x.y, v[i][2] = x.z, v[i][3] = x.w;
        } else {
          v[i][0] = src[(s0 + i) * split_stride];
        }
      }
    }
  };
  load(0);
  float mx = -INFINITY;
  for (int s = tid; s < splits; s += kThreadsPerRow) {
    const float l = ws_lse[s * stride + th];
    sw[s] = l;
    mx = fmaxf(mx, l);
  }
  mx = cuda::WarpMax(mx);
  if (lane == 0) smax[warp] = mx;
  __syncthreads();
  mx = smax[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) mx = fmaxf(mx, smax[w]);
  __nv_bfloat16* dst = out + t * o_ts + h * o_hs + tid * kCols;
  if (mx == -INFINITY) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) dst[c] = __float2bfloat16_rn(0.0f);
    if (tid == 0 && lse != nullptr) lse[th] = INFINITY;
    return;
  }
  for (int s = tid; s < splits; s += kThreadsPerRow) sw[s] = expf(sw[s] - mx);  // empty splits: exp(-inf) = 0
  __syncthreads();
  float sum = 0.0f;
  for (int s = 0; s < splits; ++s) sum += sw[s];
  float acc[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) acc[c] = 0.0f;
  for (int s0 = 0; s0 < splits; s0 += kBatch) {
    if (s0 > 0) load(s0);
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      if (s0 + i < splits) {
        const float w = sw[s0 + i];
#pragma unroll
        for (int c = 0; c < kCols; ++c) acc[c] = fmaf(w, v[i][c], acc[c]);
      }
    }
  }
  const float inv = 1.0f / sum;
#pragma unroll
  for (int c = 0; c < kCols; ++c) dst[c] = __float2bfloat16_rn(acc[c] * inv);
  if (tid == 0 && lse != nullptr) lse[th] = mx + logf(sum);
}

}  // namespace

absl::Status LaunchSplitMerge(const MlaArgs& a, int splits, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(a.tokens) * a.heads;
  if (rows <= kMergeFewRows) {
    MergeSplitsKernel<1><<<static_cast<unsigned>(rows), kDimV, 0, stream>>>(a.ws_o, a.ws_lse, splits, a.tokens, a.heads,
                                                                           a.out, a.o_ts, a.o_hs, a.lse);
  } else {
    MergeSplitsKernel<4><<<static_cast<unsigned>(rows), kDimV / 4, 0, stream>>>(
        a.ws_o, a.ws_lse, splits, a.tokens, a.heads, a.out, a.o_ts, a.o_hs, a.lse);
  }
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("MergeSplitsKernel");
  return absl::OkStatus();
}

}  // namespace spar::mla
