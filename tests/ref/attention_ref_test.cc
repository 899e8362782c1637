#include <cmath>
#include <limits>
#include <vector>

#include "base/rng.h"
#include "gtest/gtest.h"
#include "kernels/ref/indexer_ref.h"
#include "kernels/ref/sparse_mla_ref.h"

namespace spar::ref {
namespace {

std::vector<float> Random(size_t n, uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = rng.Symmetric() * scale;
  return v;
}

TEST(SparseMlaRefTest, MatchesDoublePrecisionSoftmax) {
  const int slots = 300, heads = 3, tokens = 4, topk = 40;
  auto kv = Random(slots * kLatentDim, 1);
  auto q = Random(tokens * heads * kLatentDim, 2, 0.2f);
  Rng rng(3);
  std::vector<int32_t> idx(tokens * topk);
  for (auto& i : idx) i = static_cast<int32_t>(rng.Below(slots + 40)) - 20;  // some invalid
  idx[5] = idx[6];                                                          // a duplicate
  LatentCacheView cache{LatentFormat::kF32, reinterpret_cast<const uint8_t*>(kv.data()), slots};
  std::vector<float> out(tokens * heads * kLatentNopeDim), lse(tokens * heads);
  const float scale = 0.0625f;
  SparseMla(q.data(), tokens, heads, cache, idx.data(), topk, scale, out.data(), lse.data());
  for (int t = 0; t < tokens; ++t) {
    for (int h = 0; h < heads; ++h) {
      std::vector<double> s;
      std::vector<int> rows;
      for (int j = 0; j < topk; ++j) {
        const int slot = idx[t * topk + j];
        if (slot < 0 || slot >= slots) continue;
        double d = 0;
        for (int i = 0; i < kLatentDim; ++i) d += q[(t * heads + h) * kLatentDim + i] * kv[slot * kLatentDim + i];
        s.push_back(d * scale);
        rows.push_back(slot);
      }
      double mx = -1e300, sum = 0;
      for (double v : s) mx = std::max(mx, v);
      for (double v : s) sum += std::exp(v - mx);
      EXPECT_NEAR(lse[t * heads + h], mx + std::log(sum), 1e-4);
      for (int i = 0; i < kLatentNopeDim; i += 37) {
        double o = 0;
        for (size_t j = 0; j < s.size(); ++j) o += std::exp(s[j] - mx) / sum * kv[rows[j] * kLatentDim + i];
        EXPECT_NEAR(out[(t * heads + h) * kLatentNopeDim + i], o, 1e-5);
      }
    }
  }
}

TEST(SparseMlaRefTest, NoValidIndexGivesZeroAndInfiniteLse) {
  std::vector<float> kv(2 * kLatentDim, 1.0f), q(2 * kLatentDim, 1.0f);
  std::vector<int32_t> idx = {-1, 7, -3, 2};
  LatentCacheView cache{LatentFormat::kF32, reinterpret_cast<const uint8_t*>(kv.data()), 2};
  std::vector<float> out(2 * kLatentNopeDim, NAN), lse(2, NAN);
  SparseMla(q.data(), 1, 2, cache, idx.data(), 4, 0.1f, out.data(), lse.data());
  for (float v : out) EXPECT_EQ(v, 0.0f);
  EXPECT_TRUE(std::isinf(lse[0]) && lse[0] > 0);
}

TEST(IndexerRefTest, RaggedLogitsMatchBruteForce) {
  const int rows = 5, heads = 4, dim = 128, keys = 70;
  auto q = Random(rows * heads * dim, 4), w = Random(rows * heads, 5), k = Random(keys * dim, 6);
  auto ks_scale = Random(keys, 7, 1.0f);
  for (auto& s : ks_scale) s = std::fabs(s) + 0.1f;
  std::vector<int32_t> ks = {0, 3, 10, 0, 69}, ke = {1, 40, 70, 0, 70};
  std::vector<float> logits(rows * keys);
  IndexerLogits(q.data(), w.data(), rows, heads, dim, k.data(), ks_scale.data(), keys, ks.data(), ke.data(),
                logits.data());
  for (int t = 0; t < rows; ++t) {
    for (int s = 0; s < keys; ++s) {
      if (s < ks[t] || s >= ke[t]) {
        EXPECT_TRUE(std::isinf(logits[t * keys + s]) && logits[t * keys + s] < 0);
        continue;
      }
      double total = 0;
      for (int h = 0; h < heads; ++h) {
        double d = 0;
        for (int i = 0; i < dim; ++i) d += q[(t * heads + h) * dim + i] * k[s * dim + i];
        total += w[t * heads + h] * std::max(d, 0.0);
      }
      EXPECT_NEAR(logits[t * keys + s], total * ks_scale[s], 1e-4);
    }
  }
}

TEST(IndexerRefTest, PagedEqualsRaggedThroughBlockTable) {
  const int heads = 2, ctx = 150;
  auto q = Random(heads * kIndexerHeadDim, 8), w = Random(heads, 9);
  auto k = Random(ctx * kIndexerHeadDim, 10);
  // Three pages in scrambled order: positions 0-63 in page 2, 64-127 in 0, 128- in 1.
  const std::vector<int32_t> table = {2, 0, 1};
  for (IndexerFormat fmt : {IndexerFormat::kF32, IndexerFormat::kBF16, IndexerFormat::kFp8}) {
    std::vector<uint8_t> pages(3 * IndexerPageBytes(fmt));
    std::vector<float> deq(ctx * kIndexerHeadDim), scales(ctx);
    for (int s = 0; s < ctx; ++s) {
      uint8_t* page = pages.data() + table[s / 64] * IndexerPageBytes(fmt);
      EncodeIndexerKey(fmt, k.data() + s * kIndexerHeadDim, page, s % 64);
      DecodeIndexerKey(fmt, page, s % 64, deq.data() + s * kIndexerHeadDim, &scales[s]);
    }
    const int32_t* bt = table.data();
    const int32_t len = ctx;
    std::vector<float> paged(200), ragged(ctx);
    IndexerLogitsPaged(q.data(), w.data(), 1, heads, IndexerCacheView{fmt, pages.data()}, &bt, &len, paged.data(), 200);
    const int32_t ks = 0, ke = ctx;
    IndexerLogits(q.data(), w.data(), 1, heads, kIndexerHeadDim, deq.data(), scales.data(), ctx, &ks, &ke, ragged.data());
    for (int s = 0; s < ctx; ++s) EXPECT_FLOAT_EQ(paged[s], ragged[s]);
    for (int s = ctx; s < 200; ++s) EXPECT_TRUE(std::isinf(paged[s]));
  }
}

}  // namespace
}  // namespace spar::ref
