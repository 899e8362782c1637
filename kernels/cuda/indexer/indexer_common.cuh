// Device helpers shared by the indexer kernels (internal to kernels/cuda/indexer).
//
// A 128-dim vector handled by one warp lives as 4 consecutive values per lane:
// lane l holds dims [4l, 4l + 4). RoPE (dims [0, 64)) and the Hadamard
// butterfly are written for that layout.
#ifndef SPAR_KERNELS_CUDA_INDEXER_INDEXER_COMMON_CUH_
#define SPAR_KERNELS_CUDA_INDEXER_INDEXER_COMMON_CUH_

#include "kernels/cuda/common/arch.cuh"

#include <cuda_bf16.h>

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/cache_layout.h"
#include "kernels/cuda/common/load_early.cuh"
#include "kernels/cuda/indexer/indexer.h"

namespace spar::cuda::indexer {

inline constexpr int kDim = kIndexerHeadDim;
inline constexpr int kRopeHalf = 32;    // rope pairs
inline constexpr int kFp8PageBytes = static_cast<int>(IndexerPageBytes(IndexerFormat::kFp8));
inline constexpr int kBf16PageBytes = static_cast<int>(IndexerPageBytes(IndexerFormat::kBF16));

// RoPE on dims [0, 64) of the warp's vector (ref::ApplyRope semantics, one
// position). cs/sn: the 32 cos/sin values of the position.
//   interleaved: pairs (2i, 2i+1) -> both in one lane;
//   half-split:  pairs (i, i+32)  -> lane l < 8 pairs with lane l + 8.
// In two steps, so a caller can issue the table loads early and let them
// fly while it does other work (the key write's LayerNorm reductions, with
// kPinned: LoadEarly keeps the compilers from sinking them to the rotation).
// The query preps keep plain loads: the paged logits kernel with its prep's
// loads pinned and batched four heads a warp ran 2 us slower (ncu, H200
// running sm80 code, 2026-12-04).
struct RopeCoefs {
  float c[4], s[4];  // lanes < 16: the cos/sin of this lane's pairs (interleaved: 2, half-split: 4)
};

template <bool kPinned = false>
__device__ __forceinline__ RopeCoefs LoadRopeCoefs(int lane, const float* cs, const float* sn, bool interleaved) {
  RopeCoefs r{};
  if (lane < 16) {
    const int base = interleaved ? 2 * lane : 4 * (lane & 7);  // pair index of the lane's first value pair
    const int n = interleaved ? 2 : 4;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (e < n) {
        r.c[e] = kPinned ? LoadEarly(cs + base + e) : cs[base + e];
        r.s[e] = kPinned ? LoadEarly(sn + base + e) : sn[base + e];
      }
    }
  }
  return r;
}

__device__ __forceinline__ void ApplyRopeCoefs(float (&v)[4], int lane, const RopeCoefs& r, bool interleaved) {
  if (interleaved) {
    if (lane < 16) {
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        const float c = r.c[p], s = r.s[p];
        const float x0 = v[2 * p], x1 = v[2 * p + 1];
        v[2 * p] = x0 * c - x1 * s;
        v[2 * p + 1] = x1 * c + x0 * s;
      }
    }
  } else {
    float other[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) other[e] = __shfl_xor_sync(0xffffffffu, v[e], 8);
    if (lane < 16) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float c = r.c[e], s = r.s[e];
        // lane < 8 holds x[i] (partner x[i+32]); lanes 8..15 hold x[i+32].
        v[e] = lane < 8 ? v[e] * c - other[e] * s : v[e] * c + other[e] * s;
      }
    }
  }
}

__device__ __forceinline__ void RopeWarp(float (&v)[4], int lane, const float* cs, const float* sn,
                                         bool interleaved) {
  ApplyRopeCoefs(v, lane, LoadRopeCoefs(lane, cs, sn, interleaved), interleaved);
}

// y = H·x / sqrt(128), H the Sylvester-ordered Hadamard matrix
// (H[i][j] = (-1)^popcount(i & j)), as fast_hadamard_transform computes it.
__device__ __forceinline__ void HadamardWarp(float (&v)[4], int lane) {
  // Index bits 0-1: inside the lane.
  float a0 = v[0] + v[1], a1 = v[0] - v[1], a2 = v[2] + v[3], a3 = v[2] - v[3];
  v[0] = a0 + a2;
  v[1] = a1 + a3;
  v[2] = a0 - a2;
  v[3] = a1 - a3;
  // Index bits 2-6: across lanes. The lower index of a pair keeps x + y, the
  // upper one x_lower - x_upper.
#pragma unroll
  for (int m = 1; m < 32; m <<= 1) {
    const bool upper = (lane & m) != 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float o = __shfl_xor_sync(0xffffffffu, v[e], m);
      v[e] = upper ? o - v[e] : v[e] + o;
    }
  }
  const float scale = 0.08838834764831845f;  // 128^-0.5
#pragma unroll
  for (int e = 0; e < 4; ++e) v[e] *= scale;
}

__device__ __forceinline__ void Bf16x4ToFloat(const uint2& raw, float (&v)[4]) {
  const __nv_bfloat162 a = *reinterpret_cast<const __nv_bfloat162*>(&raw.x);
  const __nv_bfloat162 b = *reinterpret_cast<const __nv_bfloat162*>(&raw.y);
  v[0] = __low2float(a);
  v[1] = __high2float(a);
  v[2] = __low2float(b);
  v[3] = __high2float(b);
}

__device__ __forceinline__ void LoadBf16x4(const __nv_bfloat16* p, float (&v)[4]) {
  Bf16x4ToFloat(*reinterpret_cast<const uint2*>(p), v);
}

__device__ __forceinline__ void StoreBf16x4(__nv_bfloat16* p, const float (&v)[4]) {
  // __floats2bfloat162_rn rounds to nearest even, like spar::FloatToBf16.
  const __nv_bfloat162 a = __floats2bfloat162_rn(v[0], v[1]);
  const __nv_bfloat162 b = __floats2bfloat162_rn(v[2], v[3]);
  uint2 raw;
  raw.x = *reinterpret_cast<const uint32_t*>(&a);
  raw.y = *reinterpret_cast<const uint32_t*>(&b);
  *reinterpret_cast<uint2*>(p) = raw;
}

// One query head's prep, by a warp: in (the wq_b output, bf16) -> RoPE at
// `pos` -> Hadamard when asked -> out (bf16). The query prep kernel and the
// paged logits kernel's own prep both run this, so their q bits agree.
__device__ __forceinline__ void PrepQueryWarp(const __nv_bfloat16* in, __nv_bfloat16* out, int lane,
                                              const IndexerRope& rope, int64_t pos, bool hadamard) {
  float v[4];
  LoadBf16x4(in + 4 * lane, v);
  RopeWarp(v, lane, rope.cos + pos * kRopeHalf, rope.sin + pos * kRopeHalf, rope.pairs == ref::RopePairs::kInterleaved);
  if (hadamard) HadamardWarp(v, lane);
  StoreBf16x4(out + 4 * lane, v);
}

// A head's weight as the logits use it (the same multiply in both preps).
__device__ __forceinline__ float ScaledHeadWeight(float w, float weight_scale) { return w * weight_scale; }

// float -> e4m3, round to nearest even, saturating to +-448, bit-identical
// to spar::FloatToE4m3 (base/numeric.cc). sm80 has no cvt to e4m3.
__device__ __forceinline__ uint32_t FloatToE4m3Rn(float f) {
  const uint32_t sign = (__float_as_uint(f) >> 24) & 0x80u;
  if (isnan(f)) return 0x7fu;
  const float a = fabsf(f);
  if (a >= 448.0f) return sign | 0x7eu;
  if (a == 0.0f) return sign;
  int e = static_cast<int>((__float_as_uint(a) >> 23) & 0xff) - 127;  // float subnormals -> e = -127
  if (e < -6) {
    // e4m3 subnormal range, quantum 2^-9 (the multiply is exact).
    const int qi = __float2int_rn(a * 512.0f);
    return qi >= 8 ? (sign | 0x08u) : (sign | static_cast<uint32_t>(qi));
  }
  // Normal: 3 mantissa bits, quantum 2^(e-3); a * 2^(3-e) is exact.
  int q = __float2int_rn(a * __uint_as_float(static_cast<uint32_t>(3 - e + 127) << 23));
  if (q == 16) {
    q = 8;
    ++e;
  }
  const int exp_field = e + 7;
  const int mant = q - 8;
  if (exp_field > 15 || (exp_field == 15 && mant == 7)) return sign | 0x7eu;
  return sign | static_cast<uint32_t>((exp_field << 3) | mant);
}

// 4-byte cp.async (.ca); src_bytes 0 zero-fills without reading.
__device__ __forceinline__ void CpAsync4(void* smem_dst, const void* gmem_src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(static_cast<uint32_t>(
                   __cvta_generic_to_shared(smem_dst))),
               "l"(gmem_src), "r"(src_bytes));
}

}  // namespace spar::cuda::indexer

namespace spar::indexer_internal {


// Opts a kernel into more than 48 KB of dynamic smem once per device, so the
// launch path does not pay a driver call every time. Thread-safe.
class SmemOptIn {
 public:
  template <typename Kernel>
  cudaError_t Ensure(Kernel* kernel, int bytes) {
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    if (dev >= 0 && dev < kMaxDevices && done_[dev].load(std::memory_order_acquire)) return cudaSuccess;
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (e == cudaSuccess && dev >= 0 && dev < kMaxDevices) done_[dev].store(true, std::memory_order_release);
    return e;
  }

 private:
  static constexpr int kMaxDevices = 64;
  std::atomic<bool> done_[kMaxDevices] = {};
};


}  // namespace spar::indexer_internal

#endif  // SPAR_KERNELS_CUDA_INDEXER_INDEXER_COMMON_CUH_
