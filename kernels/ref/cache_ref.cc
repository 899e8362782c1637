#include "kernels/ref/cache_ref.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/numeric.h"

namespace spar::ref {

void EncodeLatentRow(LatentFormat format, const float* row, uint8_t* dst) {
  switch (format) {
    case LatentFormat::kF32:
      std::memcpy(dst, row, kLatentDim * 4);
      return;
    case LatentFormat::kBF16:
      for (int i = 0; i < kLatentDim; ++i) {
        const uint16_t b = FloatToBf16(row[i]);
        std::memcpy(dst + 2 * i, &b, 2);
      }
      return;
    case LatentFormat::kFp8Ds: {
      for (int tile = 0; tile < 4; ++tile) {
        float amax = 0;
        for (int i = 0; i < 128; ++i) amax = std::max(amax, std::fabs(row[tile * 128 + i]));
        const float scale = std::max(amax, 1e-4f) / kE4m3Max;
        std::memcpy(dst + kLatentNopeDim + 4 * tile, &scale, 4);
        for (int i = 0; i < 128; ++i) dst[tile * 128 + i] = FloatToE4m3(row[tile * 128 + i] / scale);
      }
      for (int i = 0; i < kLatentRopeDim; ++i) {
        const uint16_t b = FloatToBf16(row[kLatentNopeDim + i]);
        std::memcpy(dst + kLatentNopeDim + 16 + 2 * i, &b, 2);
      }
      return;
    }
  }
}

void DecodeLatentRow(LatentFormat format, const uint8_t* src, float* row) {
  switch (format) {
    case LatentFormat::kF32:
      std::memcpy(row, src, kLatentDim * 4);
      return;
    case LatentFormat::kBF16:
      for (int i = 0; i < kLatentDim; ++i) {
        uint16_t b;
        std::memcpy(&b, src + 2 * i, 2);
        row[i] = Bf16ToFloat(b);
      }
      return;
    case LatentFormat::kFp8Ds: {
      for (int tile = 0; tile < 4; ++tile) {
        float scale;
        std::memcpy(&scale, src + kLatentNopeDim + 4 * tile, 4);
        for (int i = 0; i < 128; ++i) row[tile * 128 + i] = E4m3ToFloat(src[tile * 128 + i]) * scale;
      }
      for (int i = 0; i < kLatentRopeDim; ++i) {
        uint16_t b;
        std::memcpy(&b, src + kLatentNopeDim + 16 + 2 * i, 2);
        row[kLatentNopeDim + i] = Bf16ToFloat(b);
      }
      return;
    }
  }
}

void EncodeIndexerKey(IndexerFormat format, const float* key, uint8_t* page, int offset) {
  switch (format) {
    case IndexerFormat::kF32:
      std::memcpy(page + offset * kIndexerHeadDim * 4, key, kIndexerHeadDim * 4);
      return;
    case IndexerFormat::kBF16:
      for (int i = 0; i < kIndexerHeadDim; ++i) {
        const uint16_t b = FloatToBf16(key[i]);
        std::memcpy(page + (offset * kIndexerHeadDim + i) * 2, &b, 2);
      }
      return;
    case IndexerFormat::kFp8: {
      float amax = 0;
      for (int i = 0; i < kIndexerHeadDim; ++i) amax = std::max(amax, std::fabs(key[i]));
      const float scale = std::max(amax, 1e-4f) / kE4m3Max;
      for (int i = 0; i < kIndexerHeadDim; ++i) page[offset * kIndexerHeadDim + i] = FloatToE4m3(key[i] / scale);
      std::memcpy(page + kCacheBlockTokens * kIndexerHeadDim + 4 * offset, &scale, 4);
      return;
    }
  }
}

void DecodeIndexerKey(IndexerFormat format, const uint8_t* page, int offset, float* values, float* scale) {
  switch (format) {
    case IndexerFormat::kF32:
      std::memcpy(values, page + offset * kIndexerHeadDim * 4, kIndexerHeadDim * 4);
      *scale = 1.0f;
      return;
    case IndexerFormat::kBF16:
      for (int i = 0; i < kIndexerHeadDim; ++i) {
        uint16_t b;
        std::memcpy(&b, page + (offset * kIndexerHeadDim + i) * 2, 2);
        values[i] = Bf16ToFloat(b);
      }
      *scale = 1.0f;
      return;
    case IndexerFormat::kFp8:
      for (int i = 0; i < kIndexerHeadDim; ++i) values[i] = E4m3ToFloat(page[offset * kIndexerHeadDim + i]);
      std::memcpy(scale, page + kCacheBlockTokens * kIndexerHeadDim + 4 * offset, 4);
      return;
  }
}

}  // namespace spar::ref
