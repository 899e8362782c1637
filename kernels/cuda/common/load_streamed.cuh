// 16-byte loads of data a kernel reads once: the weights a decode GEMM
// streams from DRAM. Read-only for the kernel's lifetime (.nc) and not
// allocated in L1 (L1::no_allocate), where they would only evict what the
// kernel does re-read (activations, scales). volatile: issued where written,
// so a round of them goes out before its first use (w8a16_stream.cu,
// w4a16_stream.cu).
#ifndef SPAR_KERNELS_CUDA_COMMON_LOAD_STREAMED_CUH_
#define SPAR_KERNELS_CUDA_COMMON_LOAD_STREAMED_CUH_

#include <cstdint>

#include "kernels/cuda/common/arch.cuh"

namespace spar::cuda {

__device__ __forceinline__ uint4 LoadStreamed16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

}  // namespace spar::cuda

#endif  // SPAR_KERNELS_CUDA_COMMON_LOAD_STREAMED_CUH_
