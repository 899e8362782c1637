#include "kernels/ref/cache_ref.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "base/numeric.h"
#include "base/rng.h"
#include "gtest/gtest.h"

namespace spar::ref {
namespace {

TEST(CacheRefTest, LatentFormatsRoundTripWithinTheirPrecision) {
  Rng rng(21);
  std::vector<float> row(kLatentDim);
  for (auto& v : row) v = rng.Symmetric() * 3.0f;
  EXPECT_EQ(LatentRowBytes(LatentFormat::kFp8Ds), 656u);
  EXPECT_EQ(LatentRowBytes(LatentFormat::kBF16), 1152u);
  for (LatentFormat fmt : {LatentFormat::kF32, LatentFormat::kBF16, LatentFormat::kFp8Ds}) {
    std::vector<uint8_t> bytes(LatentRowBytes(fmt));
    std::vector<float> back(kLatentDim);
    EncodeLatentRow(fmt, row.data(), bytes.data());
    DecodeLatentRow(fmt, bytes.data(), back.data());
    for (int i = 0; i < kLatentDim; ++i) {
      const bool rope = i >= kLatentNopeDim;
      float tol = 0;
      if (fmt == LatentFormat::kBF16 || (fmt == LatentFormat::kFp8Ds && rope)) tol = std::fabs(row[i]) / 256;
      if (fmt == LatentFormat::kFp8Ds && !rope) tol = std::max(std::fabs(row[i]) / 16, 3.0f / 448 / 512);
      EXPECT_LE(std::fabs(back[i] - row[i]), tol * 1.0001f) << i;
    }
  }
}

TEST(CacheRefTest, IndexerFp8PageLayoutIsValuesThenScales) {
  EXPECT_EQ(IndexerPageBytes(IndexerFormat::kFp8), 64u * 132);
  std::vector<uint8_t> page(IndexerPageBytes(IndexerFormat::kFp8), 0);
  std::vector<float> key(kIndexerHeadDim, 0.5f);
  key[3] = -2.0f;
  EncodeIndexerKey(IndexerFormat::kFp8, key.data(), page.data(), 5);
  float scale;
  std::memcpy(&scale, page.data() + 64 * 128 + 5 * 4, 4);
  EXPECT_FLOAT_EQ(scale, 2.0f / 448.0f);
  EXPECT_EQ(E4m3ToFloat(page[5 * 128 + 3]), -448.0f);
  std::vector<float> vals(kIndexerHeadDim);
  float s2;
  DecodeIndexerKey(IndexerFormat::kFp8, page.data(), 5, vals.data(), &s2);
  EXPECT_EQ(s2, scale);
  EXPECT_NEAR(vals[0] * s2, 0.5f, 0.5f / 16);
}

}  // namespace
}  // namespace spar::ref
