// Global loads issued where they are written. A kernel on a decode step's
// critical path wants every independent load in flight at once, but the
// compilers move a weak load towards its first use: into the branch that
// alone reads it, behind an early return, behind the arithmetic on an
// earlier load (ptxas does this too, on PTX that has them in order), and
// every moved load can add a memory round trip (~0.5 us) to the kernel.
// These are relaxed gpu-scope loads (ld.relaxed.gpu, served by L2 like
// __ldcg): strong memory operations keep their program order through both
// compilers, so a group of LoadEarly calls written together is issued
// together, in that order (put the one whose value is used first last).
//
// For data that no other thread writes during the kernel. Not for a
// kernel's prologue ahead of a cp.async pipeline: in the W8A16 grouped
// GEMM (its work entry and count) they made the batch-64 decode step 1 %
// slower and the batch-1 step no faster (H200 running sm80 code, 2026-12-04):
// probably because the compilers keep later memory operations behind a
// strong load too, which is what pins these loads.
#ifndef SPAR_KERNELS_CUDA_COMMON_LOAD_EARLY_CUH_
#define SPAR_KERNELS_CUDA_COMMON_LOAD_EARLY_CUH_

#include <cstdint>

#include "kernels/cuda/common/arch.cuh"

namespace spar::cuda {

__device__ __forceinline__ uint16_t LoadEarly(const uint16_t* p) {
  uint16_t v;
  asm volatile("ld.relaxed.gpu.global.u16 %0, [%1];" : "=h"(v) : "l"(p));
  return v;
}

__device__ __forceinline__ int32_t LoadEarly(const int32_t* p) {
  int32_t v;
  asm volatile("ld.relaxed.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}

__device__ __forceinline__ float LoadEarly(const float* p) {
  float v;
  asm volatile("ld.relaxed.gpu.global.f32 %0, [%1];" : "=f"(v) : "l"(p));
  return v;
}

__device__ __forceinline__ uint2 LoadEarly(const uint2* p) {
  uint2 v;
  asm volatile("ld.relaxed.gpu.global.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

__device__ __forceinline__ uint4 LoadEarly(const uint4* p) {
  uint4 v;
  asm volatile("ld.relaxed.gpu.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

__device__ __forceinline__ float4 LoadEarly(const float4* p) {
  float4 v;
  asm volatile("ld.relaxed.gpu.global.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
  return v;
}

}  // namespace spar::cuda

#endif  // SPAR_KERNELS_CUDA_COMMON_LOAD_EARLY_CUH_
