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

// The query prep inside the paged launch (IndexerLogitsPagedParams::
// prep_positions) against the prep kernel followed by the plain launch: the
// logits must agree bit for bit (a decode step preps in the launch, a long
// verify step with the kernel, and their rows must select alike).
struct PrepCase {
  IndexerFormat format;
  int heads, next_n;
  bool interleaved, hadamard;
  int pages_per_cta = 0;
};

class IndexerLogitsPagedPrepTest : public ::testing::TestWithParam<PrepCase> {};

TEST_P(IndexerLogitsPagedPrepTest, EqualsPrepKernelThenLogits) {
  SPAR_REQUIRE_GPU();
  const PrepCase c = GetParam();
  ASSERT_LE(c.next_n * c.heads, IndexerLogitsPagedPrepMaxRows(c.format));
  const std::vector<int> lens = {c.next_n + 3, 64, 2049, 4000, 131};
  const int nseq = static_cast<int>(lens.size()), rows = nseq * c.next_n;
  testing::PagedCache cache = testing::BuildPagedCache(c.format, lens, 5 + c.heads * c.next_n);
  const int max_len = 4000, stride = max_len + 4, tstride = (max_len + 63) / 64 + 1;
  std::vector<int32_t> table(nseq * tstride, 0), ctx(rows), pos(rows);
  for (int b = 0; b < nseq; ++b) {
    for (size_t i = 0; i < cache.seq_tables[b].size(); ++i) table[b * tstride + i] = cache.seq_tables[b][i];
    for (int j = 0; j < c.next_n; ++j) {
      ctx[b * c.next_n + j] = lens[b] - c.next_n + j + 1;
      pos[b * c.next_n + j] = ctx[b * c.next_n + j] - 1;
    }
  }
  // Raw wq_b output and weights_proj output, both bf16; q rows padded (the
  // fused A projection's column slices have a larger stride).
  const int64_t q_stride = static_cast<int64_t>(c.heads) * 128 + 64, w_stride = c.heads + 8;
  const std::vector<uint16_t> q_raw = testing::ToBf16(testing::RandomFloats(rows * q_stride, 21 + c.heads, -2.0f, 2.0f));
  const std::vector<uint16_t> w_raw = testing::ToBf16(testing::RandomFloats(rows * w_stride, 22 + c.next_n, -0.5f, 0.5f));
  std::vector<float> cos_t, sin_t;
  testing::RopeTables(testing::IndexerRopeParams(!c.interleaved), max_len + 1, &cos_t, &sin_t);
  DeviceArray<float> d_cos, d_sin, d_wf(rows * c.heads), d_a(rows * stride), d_b(rows * stride);
  d_cos.Upload(cos_t);
  d_sin.Upload(sin_t);
  DeviceArray<uint16_t> d_q, d_q_roped(rows * q_stride), d_w;
  d_q.Upload(q_raw);
  d_w.Upload(w_raw);
  DeviceArray<int32_t> d_ctx, d_table, d_pos;
  d_ctx.Upload(ctx);
  d_table.Upload(table);
  d_pos.Upload(pos);
  DeviceArray<uint8_t> d_pages;
  d_pages.Upload(cache.pages);
  d_a.Poison();
  d_b.Poison();
  d_q_roped.Poison();
  IndexerRope rope{d_cos.get(), d_sin.get(), max_len + 1,
                   c.interleaved ? ref::RopePairs::kInterleaved : ref::RopePairs::kHalfSplit};

  IndexerQueryPrepParams qp;
  qp.tokens = rows;
  qp.heads = c.heads;
  qp.q = testing::AsBf16(d_q.get());
  qp.q_stride = q_stride;
  qp.q_out = testing::AsBf16(d_q_roped.get());
  qp.q_out_stride = q_stride;
  qp.positions = d_pos.get();
  qp.rope = rope;
  qp.hadamard = c.hadamard;
  qp.w_in_bf16 = testing::AsBf16(d_w.get());
  qp.w_in_stride = w_stride;
  qp.weight_scale = 0.0883883f;
  qp.w_out = d_wf.get();
  ASSERT_TRUE(LaunchIndexerQueryPrep(qp, nullptr).ok());

  IndexerLogitsPagedParams p;
  p.num_seqs = nseq;
  p.next_n = c.next_n;
  p.heads = c.heads;
  p.q = testing::AsBf16(d_q_roped.get());
  p.q_stride = q_stride;
  p.w = d_wf.get();
  p.w_stride = c.heads;
  p.context_lens = d_ctx.get();
  p.max_context_len = max_len;
  p.block_table = d_table.get();
  p.block_table_stride = tstride;
  p.format = c.format;
  p.cache = d_pages.get();
  p.logits = d_a.get();
  p.logits_stride = stride;
  p.fill_tail = true;
  p.pages_per_cta = c.pages_per_cta;
  absl::Status st = LaunchIndexerLogitsPaged(p, nullptr);
  ASSERT_TRUE(st.ok()) << st;

  p.q = testing::AsBf16(d_q.get());  // raw: the launch preps it
  p.w = nullptr;
  p.w_bf16 = testing::AsBf16(d_w.get());
  p.w_stride = w_stride;
  p.weight_scale = qp.weight_scale;
  p.prep_positions = d_pos.get();
  p.prep_rope = rope;
  p.prep_hadamard = c.hadamard;
  p.logits = d_b.get();
  st = LaunchIndexerLogitsPaged(p, nullptr);
  ASSERT_TRUE(st.ok()) << st;
  SPAR_ASSERT_CUDA(cudaGetLastError());
  SPAR_ASSERT_CUDA(cudaDeviceSynchronize());

  const std::vector<float> a = d_a.Download(), b = d_b.Download();
  int64_t differ = 0, finite = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
    finite += std::isfinite(b[i]);
  }
  EXPECT_EQ(differ, 0) << "of " << a.size() << " logits";
  int64_t want_finite = 0;
  for (int r = 0; r < rows; ++r) want_finite += ctx[r];
  EXPECT_EQ(finite, want_finite);
  EXPECT_EQ(std::memcmp(q_raw.data(), d_q.Download().data(), q_raw.size() * 2), 0) << "the launch wrote its q input";
}

INSTANTIATE_TEST_SUITE_P(Cases, IndexerLogitsPagedPrepTest,
                         ::testing::Values(PrepCase{IndexerFormat::kFp8, 32, 1, true, false},
                                           PrepCase{IndexerFormat::kFp8, 32, 2, false, true},
                                           PrepCase{IndexerFormat::kFp8, 64, 1, false, false},
                                           PrepCase{IndexerFormat::kFp8, 32, 1, true, true, 5},
                                           PrepCase{IndexerFormat::kBF16, 32, 4, true, false},
                                           PrepCase{IndexerFormat::kBF16, 64, 2, false, true},
                                           PrepCase{IndexerFormat::kBF16, 32, 1, false, false, 9}));

TEST(IndexerLogitsPaged, PrepRefusesATileThatDoesNotFitItsSlot) {
  EXPECT_EQ(IndexerLogitsPagedPrepMaxRows(IndexerFormat::kFp8), 66);
  EXPECT_EQ(IndexerLogitsPagedPrepMaxRows(IndexerFormat::kBF16), 128);
  IndexerLogitsPagedParams p;
  p.num_seqs = 1;
  p.heads = 32;
  p.next_n = 3;  // 96 rows
  p.format = IndexerFormat::kFp8;
  p.max_context_len = 64;
  p.q = reinterpret_cast<const __nv_bfloat16*>(uintptr_t{256});  // checked before the prep, never read
  p.q_stride = 32 * 128;
  int32_t dummy[4] = {};
  p.prep_positions = dummy;
  const absl::Status s = LaunchIndexerLogitsPaged(p, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("prep_positions"), absl::string_view::npos) << s;
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
