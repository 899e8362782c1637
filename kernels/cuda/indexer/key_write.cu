// Indexer key write (alone, or fused with the q_a RMSNorm), query
// preparation and the paged -> contiguous key gather.
// All three are memory-light elementwise kernels: one warp per 128-dim vector.
#include "kernels/cuda/common/arch.cuh"

#include <cuda_bf16.h>

#include "base/status_macros.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/invalid_arg.h"
#include "kernels/cuda/common/load_early.cuh"
#include "kernels/cuda/common/reduce.cuh"
#include "kernels/cuda/indexer/indexer.h"
#include "kernels/cuda/indexer/indexer_common.cuh"
#include "kernels/cuda/small_ops/rms_norm_row.cuh"

namespace spar {
namespace {

using cuda::indexer::kDim;
using cuda::indexer::kRopeHalf;
using cuda::indexer::Bf16x4ToFloat;
using cuda::indexer::StoreBf16x4;

constexpr int kWarpsPerBlock = 8;

// ---------------------------------------------------------------------------
// Key write: one warp per token (token t, by the whole warp).
__device__ __forceinline__ void KeyWriteWarp(const IndexerKeyWriteParams& p, bool fp8, int64_t t, int lane) {
  // Every load that does not depend on another is issued at once (LoadEarly:
  // left to the compilers, each was moved to its use and a decode step's key
  // waited four memory round trips in a row where two do).
  const int32_t slot = cuda::LoadEarly(p.slots + t);
  const int32_t pos = cuda::LoadEarly(p.positions + t);
  const float4 wt = cuda::LoadEarly(reinterpret_cast<const float4*>(p.norm_weight) + lane);
  const float4 bs = cuda::LoadEarly(reinterpret_cast<const float4*>(p.norm_bias) + lane);
  const uint2 x_raw = cuda::LoadEarly(reinterpret_cast<const uint2*>(p.x + t * p.x_stride + 4 * lane));
  if (slot < 0) return;  // padding
  // The RoPE coefficients of the key's position fly while the norm reduces.
  const bool interleaved = p.rope.pairs == ref::RopePairs::kInterleaved;
  const cuda::indexer::RopeCoefs rope = cuda::indexer::LoadRopeCoefs</*kPinned=*/true>(
      lane, p.rope.cos + static_cast<int64_t>(pos) * kRopeHalf, p.rope.sin + static_cast<int64_t>(pos) * kRopeHalf,
      interleaved);
  float v[4];
  Bf16x4ToFloat(x_raw, v);

  // Phase 1: LayerNorm in fp32 (biased variance, two passes over registers).
  const float mean = cuda::WarpSum(v[0] + v[1] + v[2] + v[3]) * (1.0f / kDim);
  float sq = 0;
#pragma unroll
  for (int e = 0; e < 4; ++e) sq += (v[e] - mean) * (v[e] - mean);
  const float var = cuda::WarpSum(sq) * (1.0f / kDim);
  const float inv = 1.0f / sqrtf(var + p.eps);
  v[0] = (v[0] - mean) * inv * wt.x + bs.x;
  v[1] = (v[1] - mean) * inv * wt.y + bs.y;
  v[2] = (v[2] - mean) * inv * wt.z + bs.z;
  v[3] = (v[3] - mean) * inv * wt.w + bs.w;

  // Phase 2: RoPE on dims [0, 64), then the optional Hadamard rotation.
  cuda::indexer::ApplyRopeCoefs(v, lane, rope, interleaved);
  if (p.hadamard) cuda::indexer::HadamardWarp(v, lane);

  // Phase 3: store into the page slot.
  const int64_t block = slot / kCacheBlockTokens;
  const int offset = slot % kCacheBlockTokens;
  if (fp8) {
    uint8_t* page = p.cache + block * cuda::indexer::kFp8PageBytes;
    const float amax = cuda::WarpMax(fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3]))));
    const float scale = fmaxf(amax, 1e-4f) / 448.0f;
    uint32_t packed = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) packed |= cuda::indexer::FloatToE4m3Rn(v[e] / scale) << (8 * e);
    reinterpret_cast<uint32_t*>(page + offset * kDim)[lane] = packed;
    if (lane == 0) reinterpret_cast<float*>(page + kCacheBlockTokens * kDim)[offset] = scale;
  } else {
    __nv_bfloat16* page = reinterpret_cast<__nv_bfloat16*>(p.cache + block * cuda::indexer::kBf16PageBytes);
    StoreBf16x4(page + offset * kDim + 4 * lane, v);
  }
}

static __global__ void __launch_bounds__(kWarpsPerBlock * 32)
    IndexerKeyWriteKernel(IndexerKeyWriteParams p, bool fp8) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (t < p.tokens) KeyWriteWarp(p, fp8, t, threadIdx.x & 31);
}

// The q_a RMSNorm and the key write of one step in one launch: blocks
// [0, norm.rows) normalise a row each (cuda::RmsNormRow, the CTA size of
// LaunchRmsNorm, so the same bits), the blocks after them write keys, one
// warp a token. Both read columns of the fused A projection; the decode
// step's logits need the keys, so in a launch of their own they sat on the
// indexer branch, the longer of the layer's two.
static __global__ void __launch_bounds__(1024)
    RmsNormAndKeyWriteKernel(const RmsNormParams norm, const IndexerKeyWriteParams key, bool fp8) {
  __shared__ float sh[33];
  if (blockIdx.x < norm.rows) {  // uniform over the CTA: RmsNormRow's barriers are safe
    cuda::RmsNormRow<false>(norm, blockIdx.x, sh);
    return;
  }
  const int warps = blockDim.x >> 5;
  const int64_t t = (static_cast<int64_t>(blockIdx.x) - norm.rows) * warps + (threadIdx.x >> 5);
  if (t < key.tokens) KeyWriteWarp(key, fp8, t, threadIdx.x & 31);
}

// ---------------------------------------------------------------------------
// Query prep: one warp per (token, head) vector; lane 0 also scales the weight.
static __global__ void __launch_bounds__(kWarpsPerBlock * 32) IndexerQueryPrepKernel(IndexerQueryPrepParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= p.tokens * p.heads) return;
  const int64_t t = row / p.heads;
  const int h = static_cast<int>(row % p.heads);
  cuda::indexer::PrepQueryWarp(p.q + t * p.q_stride + h * kDim, p.q_out + t * p.q_out_stride + h * kDim, lane,
                               p.rope, p.positions[t], p.hadamard);
  if (lane == 0) {
    const float w = p.w_in_f32 != nullptr ? p.w_in_f32[t * p.w_in_stride + h]
                                          : __bfloat162float(p.w_in_bf16[t * p.w_in_stride + h]);
    p.w_out[row] = cuda::indexer::ScaledHeadWeight(w, p.weight_scale);
  }
}

// ---------------------------------------------------------------------------
// Gather: one CTA per (page, sequence); 16-byte copies.
static __global__ void __launch_bounds__(256) IndexerGatherKernel(IndexerGatherParams p, bool fp8) {
  const int b = blockIdx.y;
  const int page_idx = blockIdx.x;
  const int len = p.seq_lens[b];
  const int first = page_idx * kCacheBlockTokens;
  if (first >= len) return;
  const int n = min(kCacheBlockTokens, len - first);
  const int64_t block = p.block_table[b * p.block_table_stride + page_idx];
  const int64_t out_row = static_cast<int64_t>(p.out_offsets[b]) + first;
  const int row_bytes = fp8 ? kDim : 2 * kDim;
  const uint8_t* page = p.cache + block * (fp8 ? cuda::indexer::kFp8PageBytes : cuda::indexer::kBf16PageBytes);
  uint8_t* dst = static_cast<uint8_t*>(p.keys) + out_row * row_bytes;
  const int chunks = n * row_bytes / 16;
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
    reinterpret_cast<uint4*>(dst)[c] = reinterpret_cast<const uint4*>(page)[c];
  }
  if (fp8 && threadIdx.x < n) {
    p.k_scale[out_row + threadIdx.x] = reinterpret_cast<const float*>(page + kCacheBlockTokens * kDim)[threadIdx.x];
  }
}

bool FormatOnDevice(IndexerFormat f) { return f == IndexerFormat::kFp8 || f == IndexerFormat::kBF16; }

absl::Status CheckRope(const char* op, const IndexerRope& r) {
  if (r.cos == nullptr) return InvalidParam(op, "rope.cos", "is null");
  if (r.sin == nullptr) return InvalidParam(op, "rope.sin", "is null");
  if (r.rows <= 0) return InvalidParam(op, "rope.rows", "must be positive");
  return absl::OkStatus();
}

bool Aligned(const void* ptr, int bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }

}  // namespace

bool IndexerKeyWriteSupported(const IndexerKeyWriteParams& p) { return FormatOnDevice(p.format); }

namespace {

absl::Status CheckKeyWrite(const IndexerKeyWriteParams& p) {
  const char* op = "LaunchIndexerKeyWrite";
  if (p.tokens < 0) return InvalidParam(op, "tokens", "must be >= 0");
  if (p.tokens == 0) return absl::OkStatus();
  if (p.x == nullptr || !Aligned(p.x, 8)) return InvalidParam(op, "x", "must be non-null and 8-byte aligned");
  if (p.x_stride < kDim || p.x_stride % 4 != 0) return InvalidParam(op, "x_stride", "must be >= 128 and a multiple of 4");
  if (p.norm_weight == nullptr || !Aligned(p.norm_weight, 16)) return InvalidParam(op, "norm_weight", "must be 16-byte aligned");
  if (p.norm_bias == nullptr || !Aligned(p.norm_bias, 16)) return InvalidParam(op, "norm_bias", "must be 16-byte aligned");
  if (!(p.eps > 0)) return InvalidParam(op, "eps", "must be positive");
  if (p.positions == nullptr) return InvalidParam(op, "positions", "is null");
  SPAR_RETURN_IF_ERROR(CheckRope(op, p.rope));
  if (p.slots == nullptr) return InvalidParam(op, "slots", "is null");
  if (!FormatOnDevice(p.format)) return InvalidParam(op, "format", "must be kFp8 or kBF16");
  if (p.cache == nullptr || !Aligned(p.cache, 16)) return InvalidParam(op, "cache", "must be 16-byte aligned");
  if ((p.tokens + kWarpsPerBlock - 1) / kWarpsPerBlock > INT32_MAX) return InvalidParam(op, "tokens", "too large");
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchIndexerKeyWrite(const IndexerKeyWriteParams& p, cudaStream_t stream) {
  SPAR_RETURN_IF_ERROR(CheckKeyWrite(p));
  if (p.tokens == 0) return absl::OkStatus();
  const int64_t blocks = (p.tokens + kWarpsPerBlock - 1) / kWarpsPerBlock;
  IndexerKeyWriteKernel<<<static_cast<unsigned>(blocks), kWarpsPerBlock * 32, 0, stream>>>(
      p, p.format == IndexerFormat::kFp8);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("IndexerKeyWriteKernel");
  return absl::OkStatus();
}

absl::Status LaunchRmsNormAndIndexerKeyWrite(const RmsNormParams& norm, const IndexerKeyWriteParams& key,
                                             cudaStream_t stream) {
  const char* op = "LaunchRmsNormAndIndexerKeyWrite";
  if (norm.residual != nullptr) return InvalidParam(op, "norm.residual", "must be null (no residual add here)");
  SPAR_RETURN_IF_ERROR(CheckRmsNormParams(norm));
  SPAR_RETURN_IF_ERROR(CheckKeyWrite(key));
  const int threads = cuda::NormThreads(norm.dim);
  const int64_t blocks = norm.rows + (key.tokens + threads / 32 - 1) / (threads / 32);
  if (blocks == 0) return absl::OkStatus();
  if (blocks > INT32_MAX) return InvalidParam(op, "rows + key tokens", "too many blocks");
  RmsNormAndKeyWriteKernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(norm, key,
                                                                                 key.format == IndexerFormat::kFp8);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("RmsNormAndKeyWriteKernel");
  return absl::OkStatus();
}

bool IndexerQueryPrepSupported(const IndexerQueryPrepParams& p) { return p.heads > 0; }

absl::Status LaunchIndexerQueryPrep(const IndexerQueryPrepParams& p, cudaStream_t stream) {
  const char* op = "LaunchIndexerQueryPrep";
  if (p.tokens < 0) return InvalidParam(op, "tokens", "must be >= 0");
  if (p.heads <= 0) return InvalidParam(op, "heads", "must be positive");
  if (p.tokens == 0) return absl::OkStatus();
  if (p.q == nullptr || !Aligned(p.q, 8)) return InvalidParam(op, "q", "must be non-null and 8-byte aligned");
  if (p.q_stride < int64_t{p.heads} * kDim || p.q_stride % 4 != 0)
    return InvalidParam(op, "q_stride", "must be >= heads * 128 and a multiple of 4");
  if (p.q_out == nullptr || !Aligned(p.q_out, 8)) return InvalidParam(op, "q_out", "must be non-null and 8-byte aligned");
  if (p.q_out_stride < int64_t{p.heads} * kDim || p.q_out_stride % 4 != 0)
    return InvalidParam(op, "q_out_stride", "must be >= heads * 128 and a multiple of 4");
  if (p.positions == nullptr) return InvalidParam(op, "positions", "is null");
  SPAR_RETURN_IF_ERROR(CheckRope(op, p.rope));
  if ((p.w_in_f32 == nullptr) == (p.w_in_bf16 == nullptr))
    return InvalidParam(op, "w_in_f32/w_in_bf16", "exactly one must be set");
  if (p.w_in_stride < p.heads) return InvalidParam(op, "w_in_stride", "must be >= heads");
  if (p.w_out == nullptr) return InvalidParam(op, "w_out", "is null");
  const int64_t blocks = (p.tokens * p.heads + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > INT32_MAX) return InvalidParam(op, "tokens", "too large");
  IndexerQueryPrepKernel<<<static_cast<unsigned>(blocks), kWarpsPerBlock * 32, 0, stream>>>(p);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("IndexerQueryPrepKernel");
  return absl::OkStatus();
}

absl::Status LaunchIndexerGather(const IndexerGatherParams& p, cudaStream_t stream) {
  const char* op = "LaunchIndexerGather";
  if (p.num_seqs < 0) return InvalidParam(op, "num_seqs", "must be >= 0");
  if (p.num_seqs == 0 || p.max_seq_len == 0) return absl::OkStatus();
  if (p.num_seqs > 65535) return InvalidParam(op, "num_seqs", "must be <= 65535");
  if (p.max_seq_len < 0) return InvalidParam(op, "max_seq_len", "must be >= 0");
  if (p.seq_lens == nullptr) return InvalidParam(op, "seq_lens", "is null");
  if (p.out_offsets == nullptr) return InvalidParam(op, "out_offsets", "is null");
  if (p.block_table == nullptr) return InvalidParam(op, "block_table", "is null");
  if (p.block_table_stride < (p.max_seq_len + kCacheBlockTokens - 1) / kCacheBlockTokens)
    return InvalidParam(op, "block_table_stride", "is smaller than ceil(max_seq_len / 64)");
  if (!FormatOnDevice(p.format)) return InvalidParam(op, "format", "must be kFp8 or kBF16");
  if (p.cache == nullptr || !Aligned(p.cache, 16)) return InvalidParam(op, "cache", "must be 16-byte aligned");
  if (p.keys == nullptr || !Aligned(p.keys, 16)) return InvalidParam(op, "keys", "must be 16-byte aligned");
  const bool fp8 = p.format == IndexerFormat::kFp8;
  if (fp8 && p.k_scale == nullptr) return InvalidParam(op, "k_scale", "is null (kFp8)");
  const dim3 grid((p.max_seq_len + kCacheBlockTokens - 1) / kCacheBlockTokens, p.num_seqs);
  IndexerGatherKernel<<<grid, 256, 0, stream>>>(p, fp8);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("IndexerGatherKernel");
  return absl::OkStatus();
}

}  // namespace spar
