// sm80 tensor-core and async-copy primitives, one thin wrapper each:
// mma.sync m16n8k16 (bf16 in, fp32 accumulate), ldmatrix, movmatrix, cp.async.
// Fragment layouts follow the PTX ISA ("Matrix Fragments for mma.m16n8k16").
#ifndef SPAR_KERNELS_CUDA_COMMON_MMA_SM80_CUH_
#define SPAR_KERNELS_CUDA_COMMON_MMA_SM80_CUH_

#include <cstdint>

#include "kernels/cuda/common/arch.cuh"

namespace spar::cuda {

// D = A·B + C for one warp: A 16x16 bf16 (4 regs), B 16x8 bf16 (2 regs),
// C/D 16x8 fp32 (4 regs).
__device__ __forceinline__ void MmaBf16M16N8K16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                                 const float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
}

__device__ __forceinline__ uint32_t SmemAddress(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// Four 8x8 b16 matrices; lane l supplies the row address of row l % 8 of
// matrix l / 8.
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddress(smem_row)));
}

__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddress(smem_row)));
}

__device__ __forceinline__ void LdMatrixX2(uint32_t (&r)[2], const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(SmemAddress(smem_row)));
}

// Transposes an 8x8 b16 matrix held in mma fragment order (lane 4g + t
// holds row g, columns 2t and 2t + 1): afterwards lane 4g + t holds rows 2t
// and 2t + 1 of column g. Turns a 16x16 A fragment of K (keys x dims) into
// the A fragment of V transposed (dims x keys) without touching memory.
__device__ __forceinline__ uint32_t MovMatrixTrans(uint32_t a) {
  uint32_t d;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(d) : "r"(a));
  return d;
}

// 16-byte global -> shared copy that bypasses registers (and L1: .cg), to a
// shared-space address. With src_bytes < 16 the rest of the destination is
// zero-filled, which is how tile edges are handled without branches. A
// kernel that issues many copies a stage works SmemAddress of its buffer out
// once and calls this form: the generic -> shared conversion of CpAsync16
// reads the CTA's cluster id each time on sm_90 machine code.
__device__ __forceinline__ void CpAsync16At(uint32_t smem_addr, const void* gmem_src, int src_bytes = 16) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr), "l"(gmem_src), "r"(src_bytes));
}

// The same to a generic pointer into shared memory.
__device__ __forceinline__ void CpAsync16(void* smem_dst, const void* gmem_src, int src_bytes = 16) {
  CpAsync16At(SmemAddress(smem_dst), gmem_src, src_bytes);
}

// The same through L1 (.ca): data several warps of a block read (activations).
__device__ __forceinline__ void CpAsync16Ca(void* smem_dst, const void* gmem_src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" ::"r"(SmemAddress(smem_dst)), "l"(gmem_src));
}

// A 4-byte copy (.ca: the only cache mode 4-byte copies have): scales.
__device__ __forceinline__ void CpAsync4At(uint32_t smem_addr, const void* gmem_src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr), "l"(gmem_src));
}

__device__ __forceinline__ void CpAsync4(void* smem_dst, const void* gmem_src) {
  CpAsync4At(SmemAddress(smem_dst), gmem_src);
}

__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

}  // namespace spar::cuda

#endif  // SPAR_KERNELS_CUDA_COMMON_MMA_SM80_CUH_
