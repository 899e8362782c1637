// What the paged caches hold, shared by every layer that touches them
// (kernels, engine, services): the shape constants of MLA's latent rows and
// the indexer's keys, the block of tokens a block id names, and the byte
// formats of both caches (dsa-spec.md §0, §4.2, §4.5). The reference codecs
// are in kernels/ref/cache_ref.h.
#ifndef SPAR_BASE_CACHE_LAYOUT_H_
#define SPAR_BASE_CACHE_LAYOUT_H_

#include <cstddef>

namespace spar {

// Tokens per cache block (a page of each cache); slot = block id * 64 + offset.
// One block table per sequence serves both caches.
inline constexpr int kCacheBlockTokens = 64;

// MLA in the absorbed form: per token and layer one latent row of 576 values,
// the 512 compressed kv values (after kv_a_layernorm, also the "V" part) then
// the 64 rotated rope key values.
inline constexpr int kLatentDim = 576;
inline constexpr int kLatentNopeDim = 512;
inline constexpr int kLatentRopeDim = 64;
// Lightning-indexer keys (and each indexer head's query): 128 values.
inline constexpr int kIndexerHeadDim = 128;

// MLA latent cache, one row of 576 values per token.
enum class LatentFormat {
  kF32,    // 2304 B/token: the cpu backend's exact reference cache
  kBF16,   // 1152 B/token
  kFp8Ds,  // 656 B/token: 512 e4m3 | 4 fp32 scales (one per 128 dims) | 64 bf16 rope
};

constexpr size_t LatentRowBytes(LatentFormat format) {
  switch (format) {
    case LatentFormat::kF32: return kLatentDim * 4;
    case LatentFormat::kBF16: return kLatentDim * 2;
    case LatentFormat::kFp8Ds: return kLatentNopeDim + 4 * 4 + kLatentRopeDim * 2;
  }
  return 0;
}

// Lightning-indexer key cache, 128 values per token.
enum class IndexerFormat {
  kF32,   // 512 B/token
  kBF16,  // 256 B/token
  kFp8,   // 132 B/token, per block: 64x128 e4m3 values, then 64 fp32 scales
};

constexpr size_t IndexerPageBytes(IndexerFormat format) {
  switch (format) {
    case IndexerFormat::kF32: return kCacheBlockTokens * kIndexerHeadDim * 4;
    case IndexerFormat::kBF16: return kCacheBlockTokens * kIndexerHeadDim * 2;
    case IndexerFormat::kFp8: return kCacheBlockTokens * (kIndexerHeadDim + 4);
  }
  return 0;
}

}  // namespace spar

#endif  // SPAR_BASE_CACHE_LAYOUT_H_
