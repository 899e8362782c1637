// One CTA per (sequence, table entry) widens a 64-row block: 72 16-byte
// output pieces per row (64 of 8 widened codes, 8 of RoPE lanes), spread over
// the CTA so consecutive threads touch consecutive bytes. Memory-bound: 656
// bytes read and 1152 written per row.
#include "kernels/cuda/attention/latent_widen.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "base/cache_layout.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/fp8_sm80.cuh"
#include "kernels/cuda/common/invalid_arg.h"

namespace spar {
namespace {

constexpr int kThreads = 256;
constexpr int kFp8RowBytes = static_cast<int>(LatentRowBytes(LatentFormat::kFp8Ds));   // 656
constexpr int kWideRowBytes = static_cast<int>(LatentRowBytes(LatentFormat::kBF16));  // 1152
constexpr int kCodePieces = kLatentNopeDim / 8; // 64 pieces of 8 codes
constexpr int kRopePieces = kLatentRopeDim * 2 / 16;  // 8 pieces of 16 bytes
constexpr int kPiecesPerRow = kCodePieces + kRopePieces;
static_assert(kFp8RowBytes == kLatentNopeDim + 16 + kLatentRopeDim * 2, "FP8 latent row layout");

__device__ __forceinline__ uint32_t PackBf16(float a, float b) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);  // .x = a (low half)
  return *reinterpret_cast<const uint32_t*>(&v);
}

__global__ void __launch_bounds__(kThreads) WidenLatentBlocksKernel(const LatentWidenParams p) {
  const int64_t s = blockIdx.y;
  const int64_t j = blockIdx.x;
  const int64_t base = p.seq_block_base[s];
  if (base + j >= p.seq_block_base[s + 1]) return;  // uniform over the CTA
  const int32_t pool_block = p.block_table[s * p.block_table_stride + j];
  const int64_t scratch_block = base + j;
  if (threadIdx.x == 0) p.block_map[pool_block] = static_cast<int32_t>(scratch_block);
  const uint8_t* src = p.cache + static_cast<int64_t>(pool_block) * kCacheBlockTokens * kFp8RowBytes;
  uint8_t* dst = reinterpret_cast<uint8_t*>(p.widened) + scratch_block * kCacheBlockTokens * kWideRowBytes;
  for (int i = threadIdx.x; i < kCacheBlockTokens * kPiecesPerRow; i += kThreads) {
    const int row = i / kPiecesPerRow;
    const int k = i - row * kPiecesPerRow;
    const uint8_t* r = src + row * kFp8RowBytes;
    uint4 out;
    if (k < kCodePieces) {
      const uint2 codes = __ldg(reinterpret_cast<const uint2*>(r + 8 * k));
      const float scale = __ldg(reinterpret_cast<const float*>(r + kLatentNopeDim) + k / 16);
      float v[8];
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        v[b] = cuda::E4m3ToFloat(static_cast<uint8_t>(codes.x >> (8 * b))) * scale;
        v[4 + b] = cuda::E4m3ToFloat(static_cast<uint8_t>(codes.y >> (8 * b))) * scale;
      }
      out = make_uint4(PackBf16(v[0], v[1]), PackBf16(v[2], v[3]), PackBf16(v[4], v[5]), PackBf16(v[6], v[7]));
    } else {
      out = __ldg(reinterpret_cast<const uint4*>(r + kLatentNopeDim + 16) + (k - kCodePieces));
    }
    *reinterpret_cast<uint4*>(dst + row * kWideRowBytes + 16 * k) = out;
  }
}

__global__ void __launch_bounds__(kThreads) RemapSlotsKernel(const SlotRemapParams p) {
  const int64_t total = p.tokens * p.list_len;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t t = i / p.list_len;
    const int64_t j = i - t * p.list_len;
    const int32_t slot = __ldg(p.indices + t * p.in_stride + j);
    int32_t row = -1;
    if (slot >= 0 && slot < p.num_slots) {
      const int32_t block = __ldg(p.block_map + slot / kCacheBlockTokens);
      if (block >= 0) row = block * kCacheBlockTokens + slot % kCacheBlockTokens;
    }
    p.out[t * p.out_stride + j] = row;
  }
}

constexpr absl::string_view kWidenOp = "WidenLatentBlocks";
constexpr absl::string_view kRemapOp = "RemapSlots";
constexpr int64_t kInt32Max = (int64_t{1} << 31) - 1;

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

bool ShouldWidenLatentRows(bool fp8_rows, int64_t tokens, int heads, int list_len, int64_t context_blocks) {
  if (!fp8_rows || heads < kMinWidenHeads || tokens <= 0 || list_len <= 0 || context_blocks <= 0) return false;
  if (static_cast<int64_t>(WidenedLatentBytes(context_blocks)) > kMaxWidenBytes) return false;
  return tokens * list_len >= kMinWidenReuse * context_blocks * kCacheBlockTokens;
}

size_t WidenedLatentBytes(int64_t blocks) {
  return static_cast<size_t>(std::max<int64_t>(blocks, 0)) * kCacheBlockTokens * kWideRowBytes;
}

absl::Status LaunchWidenLatentBlocks(const LatentWidenParams& p, cudaStream_t stream) {
  if (p.num_seqs < 0 || p.num_seqs > 65535) return InvalidParam(kWidenOp, "num_seqs", "must be in [0, 65535]");
  if (p.max_seq_blocks < 0 || p.max_seq_blocks > kInt32Max) return InvalidParam(kWidenOp, "max_seq_blocks", "out of range");
  if (p.num_seqs == 0 || p.max_seq_blocks == 0) return absl::OkStatus();
  if (p.cache == nullptr || !Aligned16(p.cache)) return InvalidParam(kWidenOp, "cache", "null or not 16-byte aligned");
  if (p.num_slots <= 0 || p.num_slots > kInt32Max || p.num_slots % kCacheBlockTokens != 0) {
    return InvalidParam(kWidenOp, "num_slots", "must be a positive multiple of 64 in int32 range");
  }
  if (p.block_table == nullptr || p.seq_block_base == nullptr || p.block_map == nullptr) {
    return InvalidParam(kWidenOp, "block_table / seq_block_base / block_map", "null");
  }
  if (p.block_table_stride < p.max_seq_blocks) return InvalidParam(kWidenOp, "block_table_stride", "< max_seq_blocks");
  if (p.widened == nullptr || !Aligned16(p.widened)) return InvalidParam(kWidenOp, "widened", "null or not 16-byte aligned");
  const dim3 grid(static_cast<unsigned>(p.max_seq_blocks), static_cast<unsigned>(p.num_seqs));
  WidenLatentBlocksKernel<<<grid, kThreads, 0, stream>>>(p);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("WidenLatentBlocksKernel");
  return absl::OkStatus();
}

absl::Status LaunchRemapSlots(const SlotRemapParams& p, cudaStream_t stream) {
  if (p.tokens < 0 || p.list_len < 0) return InvalidParam(kRemapOp, "tokens / list_len", "negative");
  if (p.tokens == 0 || p.list_len == 0) return absl::OkStatus();
  if (p.indices == nullptr || p.out == nullptr || p.block_map == nullptr) {
    return InvalidParam(kRemapOp, "indices / out / block_map", "null");
  }
  if (p.in_stride < p.list_len || p.out_stride < p.list_len) return InvalidParam(kRemapOp, "strides", "< list_len");
  if (p.num_slots < 0 || p.num_slots > kInt32Max) return InvalidParam(kRemapOp, "num_slots", "out of int32 range");
  const int64_t total = p.tokens * p.list_len;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>((total + kThreads - 1) / kThreads, 8192));
  RemapSlotsKernel<<<grid, kThreads, 0, stream>>>(p);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("RemapSlotsKernel");
  return absl::OkStatus();
}

}  // namespace spar
