// The reference codecs of the paged caches' byte formats (the formats and
// shape constants: base/cache_layout.h).
#ifndef SPAR_KERNELS_REF_CACHE_REF_H_
#define SPAR_KERNELS_REF_CACHE_REF_H_

#include <cstddef>
#include <cstdint>

#include "base/cache_layout.h"

namespace spar::ref {

// Encodes one 576-value row into `dst` (LatentRowBytes bytes).
void EncodeLatentRow(LatentFormat format, const float* row, uint8_t* dst);
// Decodes one row from `src` into 576 floats.
void DecodeLatentRow(LatentFormat format, const uint8_t* src, float* row);

// Writes one key into its page at `offset` (< kCacheBlockTokens). The FP8
// scale is max(amax, 1e-4) / 448 per token.
void EncodeIndexerKey(IndexerFormat format, const float* key, uint8_t* page, int offset);
// Reads back the key as (values, scale) with key = values * scale; for the
// unquantized formats the scale is 1.
void DecodeIndexerKey(IndexerFormat format, const uint8_t* page, int offset, float* values, float* scale);

}  // namespace spar::ref

#endif  // SPAR_KERNELS_REF_CACHE_REF_H_
