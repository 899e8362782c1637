#include "kernels/cuda/common/arch.cuh"
// Norms, RoPE, embedding gather and SiLU·mul (see small_ops.h).
#include "kernels/cuda/small_ops/small_ops.h"
#include "kernels/cuda/small_ops/rope_apply.cuh"

#include <cuda_bf16.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda/common/rope_device.cuh"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/invalid_arg.h"
#include "kernels/cuda/common/reduce.cuh"
#include "kernels/cuda/small_ops/rms_norm_row.cuh"

namespace spar {
namespace {

using cuda::BlockSum;
using cuda::Bf16x8ToFloat;
using cuda::FloatToBf16x8;
using cuda::kMaxNormDim;
using cuda::kNormChunksPerThread;
using cuda::NormThreads;

template <bool kResidual>
__global__ void __launch_bounds__(1024) RmsNormKernel(const RmsNormParams p) {
  __shared__ float sh[33];
  cuda::RmsNormRow<kResidual>(p, blockIdx.x, sh);
}

__global__ void __launch_bounds__(1024) LayerNormKernel(const LayerNormParams p) {
  __shared__ float sh[33];
  const int64_t r = blockIdx.x;
  const int chunks = p.dim / 8;
  float v[kNormChunksPerThread][8];
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kNormChunksPerThread; ++i) {
    const int c = threadIdx.x + i * blockDim.x;
    if (c >= chunks) continue;
    Bf16x8ToFloat(*reinterpret_cast<const uint4*>(p.x + r * p.x_stride + c * 8), v[i]);
#pragma unroll
    for (int k = 0; k < 8; ++k) sum += v[i][k];
  }
  const float mean = BlockSum(sum, sh) / static_cast<float>(p.dim);
  float var = 0.0f;
#pragma unroll
  for (int i = 0; i < kNormChunksPerThread; ++i) {
    const int c = threadIdx.x + i * blockDim.x;
    if (c >= chunks) continue;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float d = v[i][k] - mean;
      var = fmaf(d, d, var);
    }
  }
  var = BlockSum(var, sh) / static_cast<float>(p.dim);
  const float inv = 1.0f / sqrtf(var + p.eps);
#pragma unroll
  for (int i = 0; i < kNormChunksPerThread; ++i) {
    const int c = threadIdx.x + i * blockDim.x;
    if (c >= chunks) continue;
    float w[8], b[8];
    Bf16x8ToFloat(*reinterpret_cast<const uint4*>(p.weight + c * 8), w);
    Bf16x8ToFloat(*reinterpret_cast<const uint4*>(p.bias + c * 8), b);
#pragma unroll
    for (int k = 0; k < 8; ++k) v[i][k] = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(v[i][k], mean), inv), w[k]), b[k]);
    *reinterpret_cast<uint4*>(p.out + r * p.out_stride + c * 8) = FloatToBf16x8(v[i]);
  }
}

// One thread per rotated pair.
__global__ void RopeApplyKernel(const RopeApplyParams p) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= p.rows * (p.rotary_dim / 2)) return;
  cuda::RopeApplyPair(p, idx);
}

// One thread per 8-value chunk.
__global__ void EmbeddingKernel(const EmbeddingParams p) {
  const int chunks = p.dim / 8;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= p.tokens * chunks) return;
  const int64_t t = idx / chunks;
  const int c = static_cast<int>(idx - t * chunks);
  const int32_t id = p.ids[t];
  uint4 v = make_uint4(0u, 0u, 0u, 0u);
  if (id >= 0 && id < p.vocab) v = *reinterpret_cast<const uint4*>(p.table + static_cast<int64_t>(id) * p.dim + c * 8);
  *reinterpret_cast<uint4*>(p.out + t * p.out_stride + c * 8) = v;
}

__global__ void SiluMulKernel(const SiluMulParams p) {
  const int chunks = p.dim / 8;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= p.rows * chunks) return;
  const int64_t r = idx / chunks;
  const int c = static_cast<int>(idx - r * chunks);
  float g[8], u[8];
  Bf16x8ToFloat(*reinterpret_cast<const uint4*>(p.gate + r * p.in_stride + c * 8), g);
  Bf16x8ToFloat(*reinterpret_cast<const uint4*>(p.up + r * p.in_stride + c * 8), u);
#pragma unroll
  for (int k = 0; k < 8; ++k) g[k] = __fmul_rn(g[k] / __fadd_rn(1.0f, expf(-g[k])), u[k]);
  *reinterpret_cast<uint4*>(p.out + r * p.out_stride + c * 8) = FloatToBf16x8(g);
}

bool Aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }

unsigned Blocks(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace

bool RmsNormSupported(int dim) { return dim > 0 && dim % 8 == 0 && dim <= kMaxNormDim; }

absl::Status CheckRmsNormParams(const RmsNormParams& p) {
  constexpr absl::string_view kOp = "RmsNormParams";
  if (!RmsNormSupported(p.dim)) return InvalidParam(kOp, "dim", "must be a positive multiple of 8, <= 32768");
  if (p.rows < 0 || p.rows >= (int64_t{1} << 31)) return InvalidParam(kOp, "rows", "out of range");
  if (p.rows == 0) return absl::OkStatus();
  if (!p.x || !Aligned16(p.x) || p.x_stride % 8 != 0) return InvalidParam(kOp, "x", "null, unaligned or stride not a multiple of 8");
  if (!p.weight || !Aligned16(p.weight)) return InvalidParam(kOp, "weight", "null or unaligned");
  if (!p.out || !Aligned16(p.out) || p.out_stride % 8 != 0) return InvalidParam(kOp, "out", "null, unaligned or stride not a multiple of 8");
  if (p.residual && (!Aligned16(p.residual) || p.residual_stride % 8 != 0)) {
    return InvalidParam(kOp, "residual", "unaligned or stride not a multiple of 8");
  }
  return absl::OkStatus();
}

absl::Status LaunchRmsNorm(const RmsNormParams& p, cudaStream_t stream) {
  SPAR_RETURN_IF_ERROR(CheckRmsNormParams(p));
  if (p.rows == 0) return absl::OkStatus();
  const int threads = NormThreads(p.dim);
  if (p.residual) {
    RmsNormKernel<true><<<static_cast<unsigned>(p.rows), threads, 0, stream>>>(p);
  } else {
    RmsNormKernel<false><<<static_cast<unsigned>(p.rows), threads, 0, stream>>>(p);
  }
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("RmsNormKernel");
  return absl::OkStatus();
}

absl::Status LaunchLayerNorm(const LayerNormParams& p, cudaStream_t stream) {
  constexpr absl::string_view kOp = "LayerNormParams";
  if (!RmsNormSupported(p.dim)) return InvalidParam(kOp, "dim", "must be a positive multiple of 8, <= 32768");
  if (p.rows < 0 || p.rows >= (int64_t{1} << 31)) return InvalidParam(kOp, "rows", "out of range");
  if (p.rows == 0) return absl::OkStatus();
  if (!p.x || !Aligned16(p.x) || p.x_stride % 8 != 0) return InvalidParam(kOp, "x", "null, unaligned or stride not a multiple of 8");
  if (!p.weight || !Aligned16(p.weight)) return InvalidParam(kOp, "weight", "null or unaligned");
  if (!p.bias || !Aligned16(p.bias)) return InvalidParam(kOp, "bias", "null or unaligned");
  if (!p.out || !Aligned16(p.out) || p.out_stride % 8 != 0) return InvalidParam(kOp, "out", "null, unaligned or stride not a multiple of 8");
  LayerNormKernel<<<static_cast<unsigned>(p.rows), NormThreads(p.dim), 0, stream>>>(p);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("LayerNormKernel");
  return absl::OkStatus();
}

absl::Status CheckRopeApplyParams(const RopeApplyParams& p) {
  constexpr absl::string_view kOp = "RopeApplyParams";
  if (p.rotary_dim <= 0 || p.rotary_dim % 2 != 0) return InvalidParam(kOp, "rotary_dim", "must be positive and even");
  if (p.rows < 0) return InvalidParam(kOp, "rows", "negative");
  if (p.rows == 0) return absl::OkStatus();
  if (!p.in || !p.out) return InvalidParam(kOp, "in/out", "null");
  if (p.in_offset < 0 || p.out_offset < 0) return InvalidParam(kOp, "offsets", "negative");
  if (!p.positions || !p.inv_freq) return InvalidParam(kOp, "positions/inv_freq", "null");
  if (p.rows_per_position < 1) return InvalidParam(kOp, "rows_per_position", "must be >= 1");
  if (p.in_position_stride < 0) return InvalidParam(kOp, "in_position_stride", "negative");
  if (p.rows * (p.rotary_dim / 2) >= (int64_t{1} << 40)) return InvalidParam(kOp, "rows", "too many");
  return absl::OkStatus();
}

absl::Status LaunchRopeApply(const RopeApplyParams& p, cudaStream_t stream) {
  SPAR_RETURN_IF_ERROR(CheckRopeApplyParams(p));
  if (p.rows == 0) return absl::OkStatus();
  const int64_t n = p.rows * (p.rotary_dim / 2);
  RopeApplyKernel<<<Blocks(n, 256), 256, 0, stream>>>(p);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("RopeApplyKernel");
  return absl::OkStatus();
}

absl::Status LaunchEmbedding(const EmbeddingParams& p, cudaStream_t stream) {
  constexpr absl::string_view kOp = "EmbeddingParams";
  if (p.dim <= 0 || p.dim % 8 != 0) return InvalidParam(kOp, "dim", "must be a positive multiple of 8");
  if (p.tokens < 0) return InvalidParam(kOp, "tokens", "negative");
  if (p.tokens == 0) return absl::OkStatus();
  if (!p.ids) return InvalidParam(kOp, "ids", "null");
  if (!p.table || !Aligned16(p.table)) return InvalidParam(kOp, "table", "null or unaligned");
  if (!p.out || !Aligned16(p.out) || p.out_stride % 8 != 0) return InvalidParam(kOp, "out", "null, unaligned or stride not a multiple of 8");
  const int64_t n = p.tokens * (p.dim / 8);
  EmbeddingKernel<<<Blocks(n, 256), 256, 0, stream>>>(p);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("EmbeddingKernel");
  return absl::OkStatus();
}

absl::Status LaunchSiluMul(const SiluMulParams& p, cudaStream_t stream) {
  constexpr absl::string_view kOp = "SiluMulParams";
  if (p.dim <= 0 || p.dim % 8 != 0) return InvalidParam(kOp, "dim", "must be a positive multiple of 8");
  if (p.rows < 0) return InvalidParam(kOp, "rows", "negative");
  if (p.rows == 0) return absl::OkStatus();
  if (!p.gate || !p.up || !Aligned16(p.gate) || !Aligned16(p.up) || p.in_stride % 8 != 0) {
    return InvalidParam(kOp, "gate/up", "null, unaligned or stride not a multiple of 8");
  }
  if (!p.out || !Aligned16(p.out) || p.out_stride % 8 != 0) return InvalidParam(kOp, "out", "null, unaligned or stride not a multiple of 8");
  const int64_t n = p.rows * (p.dim / 8);
  SiluMulKernel<<<Blocks(n, 256), 256, 0, stream>>>(p);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("SiluMulKernel");
  return absl::OkStatus();
}

}  // namespace spar
