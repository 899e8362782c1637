// Reference GEMMs: Y[m, n] = X[m, k] · W[n, k]ᵀ with fp32 accumulation.
// W is fp32 here; block-FP8 weights are dequantized first (fp8_block_ref.h)
// or multiplied through Fp8GemmRef, which is the W8A16 kernel's contract.
#ifndef SPAR_KERNELS_REF_GEMM_REF_H_
#define SPAR_KERNELS_REF_GEMM_REF_H_

#include <cstdint>

namespace spar::ref {

// x: [m, k] with row stride ldx; w: [n, k] contiguous; y: [m, n] with row
// stride ldy. Threaded over output columns. Accumulates in fp32 in k order
// (blocks of 8 partial sums), which is what "fp32 accumulate" means here.
void Gemm(const float* x, int64_t ldx, int64_t m, int64_t k, const float* w, int64_t n, float* y, int64_t ldy);

// Y = X · dequant(W8)ᵀ where W8 is e4m3 [n, k] with fp32 scales per 128x128
// block ([ceil(n/128), ceil(k/128)]). X is used as given (the GPU kernel
// reads bf16 activations; round X to bf16 before calling to model that).
void Fp8Gemm(const float* x, int64_t ldx, int64_t m, int64_t k, const uint8_t* w8, const float* scales, int64_t n,
             float* y, int64_t ldy);

}  // namespace spar::ref

#endif  // SPAR_KERNELS_REF_GEMM_REF_H_
