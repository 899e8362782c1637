// Helpers for the indexer GPU tests: rope tables, paged caches built with the
// reference codecs, key quantization, and the Hadamard rotation by brute force.
#ifndef SPAR_TESTS_KERNELS_INDEXER_INDEXER_TEST_UTIL_H_
#define SPAR_TESTS_KERNELS_INDEXER_INDEXER_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "base/numeric.h"
#include "base/rng.h"
#include "kernels/ref/cache_ref.h"
#include "kernels/ref/rope_ref.h"

namespace spar::testing {

// GLM-5 indexer rope (theta 1e6, interleaved) or DeepSeek-V3.2 (theta 1e4,
// YaRN factor 40, half-split).
inline ref::RopeParams IndexerRopeParams(bool deepseek) {
  ref::RopeParams p;
  p.rotary_dim = 64;
  if (deepseek) {
    p.theta = 10000.0;
    p.yarn = true;
    p.yarn_factor = 40.0;
    p.yarn_original_max_positions = 4096;
    p.yarn_beta_fast = 32.0;
    p.yarn_beta_slow = 1.0;
  } else {
    p.theta = 1e6;
  }
  return p;
}

// cos/sin tables [rows, 32] as the kernels take them.
inline void RopeTables(const ref::RopeParams& p, int64_t rows, std::vector<float>* cos_t, std::vector<float>* sin_t) {
  const std::vector<float> inv = ref::RopeInvFreq(p);
  cos_t->assign(rows * 32, 0.0f);
  sin_t->assign(rows * 32, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    ref::RopeCosSin(inv, r, static_cast<float>(p.attention_factor), cos_t->data() + r * 32, sin_t->data() + r * 32);
  }
}

// In-place y = H x / sqrt(128), Sylvester order, in double.
inline void HadamardRef(float* v) {
  double out[128];
  for (int i = 0; i < 128; ++i) {
    double s = 0;
    for (int j = 0; j < 128; ++j) s += (__builtin_popcount(i & j) & 1 ? -1.0 : 1.0) * v[j];
    out[i] = s / std::sqrt(128.0);
  }
  for (int i = 0; i < 128; ++i) v[i] = static_cast<float>(out[i]);
}

// Random key vectors with a per-dim spread so quantization is not trivial.
inline std::vector<float> RandomKeys(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> k(n * kIndexerHeadDim);
  for (int64_t i = 0; i < n; ++i) {
    const float mag = 0.25f + 2.0f * rng.Uniform();
    for (int d = 0; d < kIndexerHeadDim; ++d) k[i * kIndexerHeadDim + d] = mag * rng.Symmetric();
  }
  return k;
}

// Paged cache of `num_pages` pages holding the keys of several sequences;
// seq_tables[b][i] is the page of tokens [64 i, 64 i + 64) of sequence b.
struct PagedCache {
  IndexerFormat format;
  std::vector<uint8_t> pages;
  std::vector<std::vector<int32_t>> seq_tables;
  std::vector<std::vector<float>> keys;  // per sequence, [len, 128] unquantized
};

inline PagedCache BuildPagedCache(IndexerFormat format, const std::vector<int>& seq_lens, uint64_t seed) {
  PagedCache c;
  c.format = format;
  int total_pages = 0;
  for (int len : seq_lens) total_pages += (len + 63) / 64;
  total_pages += 3;  // unused pages in between
  std::vector<int32_t> perm(total_pages);
  std::iota(perm.begin(), perm.end(), 0);
  Rng rng(seed);
  for (int i = total_pages - 1; i > 0; --i) std::swap(perm[i], perm[rng.Below(i + 1)]);
  const size_t page_bytes = IndexerPageBytes(format);
  c.pages.resize(total_pages * page_bytes);
  for (auto& b : c.pages) b = static_cast<uint8_t>(rng.NextU64());  // garbage where nothing is written
  int next = 0;
  for (size_t b = 0; b < seq_lens.size(); ++b) {
    const int len = seq_lens[b];
    std::vector<int32_t> table((len + 63) / 64);
    for (auto& t : table) t = perm[next++];
    c.keys.push_back(RandomKeys(len, seed * 31 + b));
    for (int s = 0; s < len; ++s) {
      ref::EncodeIndexerKey(format, c.keys.back().data() + s * kIndexerHeadDim,
                            c.pages.data() + table[s / 64] * page_bytes, s % 64);
    }
    c.seq_tables.push_back(std::move(table));
  }
  return c;
}

// Quantizes keys [n, 128] to the contiguous prefill layout (codes + scales).
inline void QuantizeKeys(const std::vector<float>& keys, int64_t n, std::vector<uint8_t>* codes,
                         std::vector<float>* scales, std::vector<float>* dequant_values) {
  std::vector<uint8_t> page(IndexerPageBytes(IndexerFormat::kFp8));
  codes->resize(n * kIndexerHeadDim);
  scales->resize(n);
  dequant_values->resize(n * kIndexerHeadDim);
  for (int64_t i = 0; i < n; ++i) {
    ref::EncodeIndexerKey(IndexerFormat::kFp8, keys.data() + i * kIndexerHeadDim, page.data(), 0);
    std::memcpy(codes->data() + i * kIndexerHeadDim, page.data(), kIndexerHeadDim);
    ref::DecodeIndexerKey(IndexerFormat::kFp8, page.data(), 0, dequant_values->data() + i * kIndexerHeadDim,
                          scales->data() + i);
  }
}

}  // namespace spar::testing

#endif  // SPAR_TESTS_KERNELS_INDEXER_INDEXER_TEST_UTIL_H_
