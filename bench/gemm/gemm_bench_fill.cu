// gemm_bench's device-side random fills (the MoE bank is ~10 GB, too much
// to fill from the host). Every value depends only on its index and the
// seed, so the grid a launcher picks changes nothing but the fill's speed.
#include "kernels/cuda/common/arch.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "base/rng.h"
#include "bench/gemm/gemm_bench_common.h"

namespace spar::gemm_bench {
namespace {

// Random e4m3 bytes without the NaN codes (0x7f, 0xff).
__global__ void FillE4m3Kernel(uint8_t* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n / 8; i += size_t{gridDim.x} * blockDim.x) {
    uint64_t h = SplitMix64(seed ^ (i * 0x2545f4914f6cdd1dull));
    for (int b = 0; b < 8; ++b) {
      const uint64_t byte = (h >> (8 * b)) & 0xff;
      if ((byte & 0x7f) == 0x7f) h ^= uint64_t{1} << (8 * b);
    }
    reinterpret_cast<uint64_t*>(p)[i] = h;
  }
}

// Scales in [2^-9, 2^-7): like real weight_scale_inv values.
__global__ void FillScalesKernel(float* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const double u = static_cast<double>(SplitMix64(seed ^ i) >> 11) * (1.0 / 9007199254740992.0);
    p[i] = static_cast<float>(std::ldexp(1.0 + u, -9 + static_cast<int>(u * 2)));
  }
}

// bf16 uniform in [-1, 1).
__global__ void FillBf16Kernel(__nv_bfloat16* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const double u = static_cast<double>(SplitMix64(seed ^ i) >> 11) * (1.0 / 9007199254740992.0);
    p[i] = __float2bfloat16(static_cast<float>(2.0 * u - 1.0));
  }
}

__global__ void FillF32Kernel(float* p, size_t n, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const double u = static_cast<double>(SplitMix64(seed ^ i) >> 11) * (1.0 / 9007199254740992.0);
    p[i] = static_cast<float>((2.0 * u - 1.0) * scale);
  }
}

// Grid-stride blocks for n items: enough to fill the GPU, at most 4096.
unsigned Blocks(size_t n) { return static_cast<unsigned>(std::clamp<size_t>((n + 255) / 256, 1, 4096)); }

}  // namespace

void FillE4m3(uint8_t* p, size_t n, uint64_t seed) { FillE4m3Kernel<<<Blocks(n / 8), 256>>>(p, n, seed); }
void FillScales(float* p, size_t n, uint64_t seed) { FillScalesKernel<<<Blocks(n), 256>>>(p, n, seed); }
void FillBf16(__nv_bfloat16* p, size_t n, uint64_t seed) { FillBf16Kernel<<<Blocks(n), 256>>>(p, n, seed); }
void FillF32(float* p, size_t n, uint64_t seed, float scale) { FillF32Kernel<<<Blocks(n), 256>>>(p, n, seed, scale); }

}  // namespace spar::gemm_bench
