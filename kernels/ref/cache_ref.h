// Byte layouts of the paged caches (dsa-spec.md §0, §4.2, §4.5) and the
// reference codecs for them. Pages hold kCacheBlockSize tokens; a slot is
// block_id * kCacheBlockSize + offset.
#ifndef SPAR_KERNELS_REF_CACHE_REF_H_
#define SPAR_KERNELS_REF_CACHE_REF_H_

#include <cstddef>
#include <cstdint>

namespace spar::ref {

inline constexpr int kCacheBlockSize = 64;
inline constexpr int kLatentDim = 576;      // 512 c_kv + 64 rotated k_pe
inline constexpr int kLatentNopeDim = 512;  // the "V" part of each row
inline constexpr int kLatentRopeDim = 64;
inline constexpr int kIndexerDim = 128;

// MLA latent cache, one row of 576 values per token.
enum class LatentFormat {
  kF32,    // 2304 B/token: the cpu backend's exact reference cache
  kBF16,   // 1152 B/token
  kFp8Ds,  // 656 B/token: 512 e4m3 | 4 fp32 scales (one per 128 dims) | 64 bf16 rope
};
size_t LatentRowBytes(LatentFormat format);

// Lightning-indexer key cache, 128 values per token.
enum class IndexerFormat {
  kF32,  // 512 B/token
  kBF16,  // 256 B/token
  kFp8,  // 132 B/token, per 64-token page: 64x128 e4m3 values, then 64 fp32 scales
};
size_t IndexerPageBytes(IndexerFormat format);

// Encodes one 576-value row into `dst` (LatentRowBytes bytes).
void EncodeLatentRow(LatentFormat format, const float* row, uint8_t* dst);
// Decodes one row from `src` into 576 floats.
void DecodeLatentRow(LatentFormat format, const uint8_t* src, float* row);

// Writes one key into its page at `offset` (< kCacheBlockSize). The FP8
// scale is max(amax, 1e-4) / 448 per token.
void EncodeIndexerKey(IndexerFormat format, const float* key, uint8_t* page, int offset);
// Reads back the key as (values, scale) with key = values * scale; for the
// unquantized formats the scale is 1.
void DecodeIndexerKey(IndexerFormat format, const uint8_t* page, int offset, float* values, float* scale);

}  // namespace spar::ref

#endif  // SPAR_KERNELS_REF_CACHE_REF_H_
