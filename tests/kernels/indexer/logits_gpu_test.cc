// Indexer logits (paged decode and ragged prefill) against kernels/ref.
//
// Tolerance: q is bf16 and keys are exactly representable (e4m3 or bf16), so
// every product is exact in fp32; only the fp32 summation order differs
// from the reference. Hence a tight bound (rel L2 <= 1e-5, per element
// <= 1e-5 of the row's largest magnitude) and exact -inf positions.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cuda/indexer/indexer.h"
#include "kernels/ref/indexer_ref.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/kernels/indexer/indexer_test_util.h"

namespace spar {
namespace {

using testing::DeviceArray;

// Compares [rows, stride] logits: same -inf / untouched (NaN poison) pattern,
// values within tolerance. Returns the number of finite reference values.
int64_t ExpectLogitsNear(const std::vector<float>& got, const std::vector<float>& want, int64_t rows, int64_t stride) {
  int64_t finite = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double row_max = 0, num = 0, den = 0;
    for (int64_t s = 0; s < stride; ++s) {
      const float w = want[r * stride + s];
      if (std::isfinite(w)) row_max = std::max(row_max, std::fabs(static_cast<double>(w)));
    }
    int bad = 0;
    for (int64_t s = 0; s < stride; ++s) {
      const float g = got[r * stride + s], w = want[r * stride + s];
      if (std::isnan(w) || std::isinf(w)) {
        if (!(std::isnan(w) ? std::isnan(g) : g == w) && bad++ < 5) {
          ADD_FAILURE() << "row " << r << " key " << s << ": got " << g << " want " << w;
        }
        continue;
      }
      ++finite;
      num += (static_cast<double>(g) - w) * (static_cast<double>(g) - w);
      den += static_cast<double>(w) * w;
      if (!(std::fabs(static_cast<double>(g) - w) <= 1e-5 * row_max + 1e-30) && bad++ < 5) {
        ADD_FAILURE() << "row " << r << " key " << s << ": got " << g << " want " << w << " (row max " << row_max << ")";
      }
    }
    if (den > 0) {
      EXPECT_LE(std::sqrt(num / den), 1e-5) << "row " << r;
    }
  }
  return finite;
}

// --- paged decode ---------------------------------------------------------------

struct PagedCase {
  IndexerFormat format;
  int heads;
  int next_n;
  bool fill_tail;
  int pages_per_cta = 0;  // > 0: many pages per CTA (pipeline slot reuse, odd page counts)
};

class IndexerLogitsPagedTest : public ::testing::TestWithParam<PagedCase> {};

TEST_P(IndexerLogitsPagedTest, MatchesReference) {
  SPAR_REQUIRE_GPU();
  const PagedCase c = GetParam();
  // Ragged sequence lengths: tiny, one page, around 2048, not multiples of 64.
  const std::vector<int> lens = {c.next_n, 64, 2047, 2049, 3001, 130};
  const int nseq = static_cast<int>(lens.size()), rows = nseq * c.next_n;
  testing::PagedCache cache = testing::BuildPagedCache(c.format, lens, 11 + c.heads + c.next_n);
  const int max_len = 3001, stride = max_len + 35, tstride = (max_len + 63) / 64 + 2;

  std::vector<int32_t> table(nseq * tstride, 0x7fffffff), ctx(rows);
  for (int b = 0; b < nseq; ++b) {
    for (size_t i = 0; i < cache.seq_tables[b].size(); ++i) table[b * tstride + i] = cache.seq_tables[b][i];
    for (int j = 0; j < c.next_n; ++j) ctx[b * c.next_n + j] = lens[b] - c.next_n + j + 1;  // MTP causal rows
  }
  const std::vector<float> q = testing::FromBf16(
      testing::ToBf16(testing::RandomFloats(rows * c.heads * 128, 3 + c.heads, -1.0f, 1.0f)));
  const std::vector<float> w = testing::RandomFloats(rows * c.heads, 4 + c.next_n, -0.05f, 0.1f);

  // Reference.
  std::vector<float> want(rows * stride);
  std::vector<const int32_t*> row_tables(rows);
  for (int r = 0; r < rows; ++r) row_tables[r] = table.data() + (r / c.next_n) * tstride;
  const ref::IndexerCacheView view{c.format, cache.pages.data()};
  ref::IndexerLogitsPaged(q.data(), w.data(), rows, c.heads, view, row_tables.data(), ctx.data(), want.data(), stride);
  if (!c.fill_tail) {
    for (int r = 0; r < rows; ++r)
      for (int s = ctx[r]; s < stride; ++s) want[r * stride + s] = std::numeric_limits<float>::quiet_NaN();
  }

  DeviceArray<uint16_t> d_q;
  d_q.Upload(testing::ToBf16(q));
  DeviceArray<float> d_w, d_logits(rows * stride);
  d_w.Upload(w);
  DeviceArray<int32_t> d_ctx, d_table;
  d_ctx.Upload(ctx);
  d_table.Upload(table);
  DeviceArray<uint8_t> d_pages;
  d_pages.Upload(cache.pages);
  d_logits.Poison();

  IndexerLogitsPagedParams p;
  p.num_seqs = nseq;
  p.next_n = c.next_n;
  p.heads = c.heads;
  p.q = testing::AsBf16(d_q.get());
  p.q_stride = c.heads * 128;
  p.w = d_w.get();
  p.w_stride = c.heads;
  p.context_lens = d_ctx.get();
  p.max_context_len = max_len;
  p.block_table = d_table.get();
  p.block_table_stride = tstride;
  p.format = c.format;
  p.cache = d_pages.get();
  p.logits = d_logits.get();
  p.logits_stride = stride;
  p.fill_tail = c.fill_tail;
  p.pages_per_cta = c.pages_per_cta;
  ASSERT_TRUE(IndexerLogitsPagedSupported(p));
  const absl::Status st = LaunchIndexerLogitsPaged(p, nullptr);
  ASSERT_TRUE(st.ok()) << st;
  SPAR_ASSERT_CUDA(cudaGetLastError());
  SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
  const int64_t finite = ExpectLogitsNear(d_logits.Download(), want, rows, stride);
  EXPECT_GT(finite, 7000 * c.next_n);  // the comparison is not vacuous
}

INSTANTIATE_TEST_SUITE_P(Cases, IndexerLogitsPagedTest,
                         ::testing::Values(PagedCase{IndexerFormat::kFp8, 32, 1, true},
                                           PagedCase{IndexerFormat::kFp8, 32, 2, false},
                                           PagedCase{IndexerFormat::kFp8, 64, 1, false},
                                           PagedCase{IndexerFormat::kFp8, 64, 2, true},
                                           PagedCase{IndexerFormat::kFp8, 32, 4, true},
                                           PagedCase{IndexerFormat::kFp8, 64, 3, true},
                                           PagedCase{IndexerFormat::kBF16, 32, 1, true},
                                           PagedCase{IndexerFormat::kBF16, 64, 2, true},
                                           PagedCase{IndexerFormat::kFp8, 32, 1, true, 7},
                                           PagedCase{IndexerFormat::kFp8, 64, 2, false, 9},
                                           PagedCase{IndexerFormat::kFp8, 32, 4, true, 47},
                                           PagedCase{IndexerFormat::kBF16, 64, 1, true, 5},
                                           PagedCase{IndexerFormat::kBF16, 32, 2, false, 11}));

TEST(IndexerLogitsPaged, RejectsBadParams) {
  IndexerLogitsPagedParams p;
  p.num_seqs = 1;
  p.heads = 48;
  absl::Status s = LaunchIndexerLogitsPaged(p, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("heads"), absl::string_view::npos);
  p.heads = 64;
  p.next_n = 5;
  EXPECT_FALSE(IndexerLogitsPagedSupported(p));
  EXPECT_EQ(LaunchIndexerLogitsPaged(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

// --- ragged prefill ---------------------------------------------------------------

struct PrefillCase {
  IndexerFormat format;
  int heads;
  bool fill_masked;
};

class IndexerLogitsPrefillTest : public ::testing::TestWithParam<PrefillCase> {};

TEST_P(IndexerLogitsPrefillTest, MatchesReference) {
  SPAR_REQUIRE_GPU();
  const PrefillCase c = GetParam();
  // Three sequences with contiguous (gathered) keys; rows are each sequence's
  // last `new_tokens` positions, causal. Plus one row with an empty range.
  const std::vector<int> seq_len = {70, 2049, 1300};
  const std::vector<int> new_tokens = {70, 45, 29};
  int num_keys = 0;
  std::vector<int32_t> ks, ke;
  for (size_t b = 0; b < seq_len.size(); ++b) {
    for (int i = 0; i < new_tokens[b]; ++i) {
      const int pos = seq_len[b] - new_tokens[b] + i;
      ks.push_back(num_keys);
      ke.push_back(num_keys + pos + 1);
    }
    num_keys += seq_len[b];
  }
  ks.push_back(17);
  ke.push_back(17);
  const int rows = static_cast<int>(ks.size()), stride = num_keys + 9;

  const std::vector<float> raw_keys = testing::RandomKeys(num_keys, 77);
  std::vector<float> key_values, key_scale(num_keys, 1.0f);
  std::vector<uint8_t> key_bytes;
  if (c.format == IndexerFormat::kFp8) {
    std::vector<float> scales;
    testing::QuantizeKeys(raw_keys, num_keys, &key_bytes, &scales, &key_values);
    key_scale = scales;
  } else {
    const std::vector<uint16_t> bf = testing::ToBf16(raw_keys);
    key_values = testing::FromBf16(bf);
    key_bytes.resize(bf.size() * 2);
    std::memcpy(key_bytes.data(), bf.data(), key_bytes.size());
  }
  const std::vector<float> q = testing::FromBf16(
      testing::ToBf16(testing::RandomFloats(rows * c.heads * 128, 21 + c.heads, -1.0f, 1.0f)));
  const std::vector<float> w = testing::RandomFloats(rows * c.heads, 22, -0.05f, 0.1f);

  std::vector<float> want(rows * num_keys);
  ref::IndexerLogits(q.data(), w.data(), rows, c.heads, 128, key_values.data(), key_scale.data(), num_keys, ks.data(),
                     ke.data(), want.data());
  std::vector<float> want_strided(rows * stride, std::numeric_limits<float>::quiet_NaN());
  for (int r = 0; r < rows; ++r)
    for (int s = 0; s < num_keys; ++s) {
      const bool in = s >= ks[r] && s < ke[r];
      if (in || c.fill_masked) want_strided[r * stride + s] = want[r * num_keys + s];
    }

  DeviceArray<uint16_t> d_q;
  d_q.Upload(testing::ToBf16(q));
  DeviceArray<float> d_w, d_scale, d_logits(rows * stride);
  d_w.Upload(w);
  d_scale.Upload(key_scale);
  DeviceArray<uint8_t> d_keys;
  d_keys.Upload(key_bytes);
  DeviceArray<int32_t> d_ks, d_ke;
  d_ks.Upload(ks);
  d_ke.Upload(ke);
  d_logits.Poison();

  IndexerLogitsParams p;
  p.rows = rows;
  p.heads = c.heads;
  p.q = testing::AsBf16(d_q.get());
  p.q_stride = c.heads * 128;
  p.w = d_w.get();
  p.w_stride = c.heads;
  p.format = c.format;
  p.keys = d_keys.get();
  p.k_scale = c.format == IndexerFormat::kFp8 ? d_scale.get() : nullptr;
  p.num_keys = num_keys;
  p.ks = d_ks.get();
  p.ke = d_ke.get();
  p.logits = d_logits.get();
  p.logits_stride = stride;
  p.fill_masked = c.fill_masked;
  ASSERT_TRUE(IndexerLogitsSupported(p));
  const absl::Status st = LaunchIndexerLogits(p, nullptr);
  ASSERT_TRUE(st.ok()) << st;
  SPAR_ASSERT_CUDA(cudaGetLastError());
  SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
  const int64_t finite = ExpectLogitsNear(d_logits.Download(), want_strided, rows, stride);
  EXPECT_GT(finite, 50000);
}

INSTANTIATE_TEST_SUITE_P(Cases, IndexerLogitsPrefillTest,
                         ::testing::Values(PrefillCase{IndexerFormat::kFp8, 32, true},
                                           PrefillCase{IndexerFormat::kFp8, 64, false},
                                           PrefillCase{IndexerFormat::kFp8, 64, true},
                                           PrefillCase{IndexerFormat::kBF16, 32, false},
                                           PrefillCase{IndexerFormat::kBF16, 64, true}));

}  // namespace
}  // namespace spar
