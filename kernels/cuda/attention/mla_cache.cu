#include "kernels/cuda/common/arch.cuh"
// Fused kv_a_layernorm + k_pe RoPE + latent cache write, one 64-thread CTA
// per token: thread i owns c values [8i, 8i+8) (one 16-byte load), threads
// 0..31 also own rope pair i.
#include "kernels/cuda/attention/mla_cache.h"

#include <cuda_bf16.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/attention/fp8_quant.cuh"
#include "kernels/cuda/common/rope_device.cuh"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/invalid_arg.h"
#include "kernels/cuda/common/load_early.cuh"
#include "kernels/cuda/small_ops/rope_apply.cuh"

namespace spar {
namespace {

constexpr int kNope = 512;
constexpr int kRope = 64;

constexpr int kThreads = 64;

template <bool kFp8>
__global__ void __launch_bounds__(kThreads) MlaCacheWriteKernel(const MlaCacheWriteParams p) {
  const int64_t t = blockIdx.x;
  const int tid = threadIdx.x;
  if (t >= p.tokens) {  // the query rope's CTAs, after the tokens'
    const int64_t idx = (t - p.tokens) * kThreads + tid;
    if (idx < p.query_rope.rows * (p.query_rope.rotary_dim / 2)) cuda::RopeApplyPair(p.query_rope, idx);
    return;
  }
  // Every load is issued at once, before the slot test and the reductions
  // (LoadEarly: the slot, the row, the norm weights, the rope pair, its
  // position and frequency): left to the compilers, a decode step's write
  // waited three memory round trips in a row on the query branch.
  const bool rope_lane = tid < kRope / 2;
  const bool rotate = rope_lane && p.inv_freq != nullptr;
  const int ia = p.interleaved ? 2 * tid : tid;
  const int ib = p.interleaved ? 2 * tid + 1 : tid + kRope / 2;
  const __nv_bfloat16* row = p.kv + t * p.kv_stride;
  const int32_t slot = cuda::LoadEarly(p.slot_mapping + t);
  const int32_t pos = rotate ? cuda::LoadEarly(p.positions + t) : 0;
  const float freq = rotate ? cuda::LoadEarly(p.inv_freq + tid) : 0.0f;
  const uint16_t raw0 = rope_lane ? cuda::LoadEarly(reinterpret_cast<const uint16_t*>(row + kNope + ia)) : 0;
  const uint16_t raw1 = rope_lane ? cuda::LoadEarly(reinterpret_cast<const uint16_t*>(row + kNope + ib)) : 0;
  const uint4 wraw = p.norm_weight != nullptr ? cuda::LoadEarly(reinterpret_cast<const uint4*>(p.norm_weight + tid * 8))
                                              : make_uint4(0, 0, 0, 0);
  const uint4 raw = cuda::LoadEarly(reinterpret_cast<const uint4*>(row + tid * 8));
  const float x0 = __bfloat162float(__ushort_as_bfloat16(raw0)), x1 = __bfloat162float(__ushort_as_bfloat16(raw1));
  if (slot < 0 || slot >= p.num_slots) return;  // uniform over the CTA

  // Phase 1: RMSNorm of c_kv in fp32 (sum of squares over the CTA).
  float c[8];
  {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      c[2 * i] = __low2float(h[i]);
      c[2 * i + 1] = __high2float(h[i]);
    }
  }
  if (p.norm_weight != nullptr) {
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) ss = fmaf(c[i], c[i], ss);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    __shared__ float warp_ss[2];
    if ((tid & 31) == 0) warp_ss[tid >> 5] = ss;
    __syncthreads();
    ss = warp_ss[0] + warp_ss[1];
    const float inv = 1.0f / sqrtf(ss / kNope + p.eps);
    const __nv_bfloat162* w = reinterpret_cast<const __nv_bfloat162*>(&wraw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      c[2 * i] = __fmul_rn(__low2float(w[i]), __fmul_rn(c[2 * i], inv));
      c[2 * i + 1] = __fmul_rn(__high2float(w[i]), __fmul_rn(c[2 * i + 1], inv));
    }
  }

  // Phase 2: rotate the rope pair of threads 0..31.
  float r0 = x0, r1 = x1;
  if (rotate) {
    float cs, sn;
    cuda::RopeCosSin(pos, freq, p.attention_factor, cs, sn);
    cuda::RopeRotate(x0, x1, cs, sn, r0, r1);
  }

  // Phase 3: encode and store.
  if constexpr (!kFp8) {
    uint8_t* dst = p.cache + static_cast<int64_t>(slot) * (kLatentDim * 2);
    uint4 o;
    uint32_t* ow = reinterpret_cast<uint32_t*>(&o);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const __nv_bfloat162 v = __floats2bfloat162_rn(c[2 * i], c[2 * i + 1]);
      ow[i] = *reinterpret_cast<const uint32_t*>(&v);
    }
    *reinterpret_cast<uint4*>(dst + tid * 16) = o;
    if (tid < kRope / 2) {
      __nv_bfloat16* rp = reinterpret_cast<__nv_bfloat16*>(dst + kNope * 2);
      rp[ia] = __float2bfloat16_rn(r0);
      rp[ib] = __float2bfloat16_rn(r1);
    }
  } else {
    uint8_t* dst = p.cache + static_cast<int64_t>(slot) * 656;
    // 16 threads share one 128-value tile: amax over the tile.
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(c[i]));
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float scale = fmaxf(amax, 1e-4f) / 448.0f;
    uint32_t lo = 0, hi = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      lo |= static_cast<uint32_t>(cuda::FloatToE4m3Rn(c[i] / scale)) << (8 * i);
      hi |= static_cast<uint32_t>(cuda::FloatToE4m3Rn(c[4 + i] / scale)) << (8 * i);
    }
    *reinterpret_cast<uint2*>(dst + tid * 8) = make_uint2(lo, hi);
    if ((tid & 15) == 0) *reinterpret_cast<float*>(dst + kNope + 4 * (tid >> 4)) = scale;
    if (tid < kRope / 2) {
      __nv_bfloat16* rp = reinterpret_cast<__nv_bfloat16*>(dst + kNope + 16);
      rp[ia] = __float2bfloat16_rn(r0);
      rp[ib] = __float2bfloat16_rn(r1);
    }
  }
}

constexpr absl::string_view kOp = "MlaCacheWrite";

}  // namespace

bool MlaCacheWriteSupported(LatentFormat format) {
  return format == LatentFormat::kBF16 || format == LatentFormat::kFp8Ds;
}

absl::Status LaunchMlaCacheWrite(const MlaCacheWriteParams& p, cudaStream_t stream) {
  if (!MlaCacheWriteSupported(p.format)) return InvalidParam(kOp, "format", "must be kBF16 or kFp8Ds");
  if (p.tokens < 0 || p.tokens > (int64_t{1} << 31) - 1) return InvalidParam(kOp, "tokens", "out of range");
  if (p.tokens == 0) return absl::OkStatus();
  if (p.kv == nullptr || (reinterpret_cast<uintptr_t>(p.kv) & 15) != 0) return InvalidParam(kOp, "kv", "null or not 16-byte aligned");
  if (p.kv_stride < kLatentDim || p.kv_stride % 8 != 0) return InvalidParam(kOp, "kv_stride", "must be >= 576 and a multiple of 8");
  if (p.norm_weight != nullptr && (reinterpret_cast<uintptr_t>(p.norm_weight) & 15) != 0) {
    return InvalidParam(kOp, "norm_weight", "not 16-byte aligned");
  }
  if (p.inv_freq != nullptr && p.positions == nullptr) return InvalidParam(kOp, "positions", "null while inv_freq is set");
  if (p.slot_mapping == nullptr) return InvalidParam(kOp, "slot_mapping", "null");
  if (p.cache == nullptr || (reinterpret_cast<uintptr_t>(p.cache) & 15) != 0) return InvalidParam(kOp, "cache", "null or not 16-byte aligned");
  if (p.num_slots < 0 || p.num_slots > (int64_t{1} << 31) - 1) return InvalidParam(kOp, "num_slots", "out of int32 range");
  if (absl::Status st = CheckRopeApplyParams(p.query_rope); !st.ok()) {
    return InvalidParam(kOp, "query_rope", st.message());
  }
  const int64_t rope_pairs = p.query_rope.rows * (p.query_rope.rotary_dim / 2);
  const int64_t grid = p.tokens + (rope_pairs + kThreads - 1) / kThreads;
  if (grid > (int64_t{1} << 31) - 1) return InvalidParam(kOp, "tokens + query_rope.rows", "too many CTAs");
  if (p.format == LatentFormat::kFp8Ds) {
    MlaCacheWriteKernel<true><<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(p);
  } else {
    MlaCacheWriteKernel<false><<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(p);
  }
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("MlaCacheWriteKernel");
  return absl::OkStatus();
}

}  // namespace spar
