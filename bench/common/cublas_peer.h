// The bf16 peer the GEMM benchmarks time at prefill sizes (gemm_bench,
// w4a16_bench): cuBLAS computing Y[m, n] = X[m, k] W[n, k]^T, the same
// orientation as the W8A16 / W4A16 GEMMs (weights row-major [n, k]).
// On the H200 cuBLAS runs Hopper wgmma kernels, which sm80 code cannot use.
#ifndef SPAR_BENCH_COMMON_CUBLAS_PEER_H_
#define SPAR_BENCH_COMMON_CUBLAS_PEER_H_

#include <cublas_v2.h>

#include <cstdint>

namespace spar::bench {

// One launch on the handle's stream (capturable into a CUDA graph); w, x, y
// are bf16 device buffers.
inline cublasStatus_t CublasBf16Gemm(cublasHandle_t h, int64_t m, int64_t n, int64_t k, const void* w, const void* x,
                                     void* y) {
  const float one = 1.0f, zero = 0.0f;
  return cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &one,
                      w, CUDA_R_16BF, static_cast<int>(k), x, CUDA_R_16BF, static_cast<int>(k), &zero, y, CUDA_R_16BF,
                      static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

}  // namespace spar::bench

#endif  // SPAR_BENCH_COMMON_CUBLAS_PEER_H_
