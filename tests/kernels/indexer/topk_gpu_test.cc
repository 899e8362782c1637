// Top-k against ref::TopK: the outputs must be identical (same set, same
// ascending order, same -1 padding), on uniform, heavily tied, real-like
// (indexer logits), NaN / -inf sprinkled and degenerate rows.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cuda/indexer/indexer.h"
#include "kernels/ref/topk_ref.h"
#include "tests/kernels/gpu_test_util.h"

namespace spar {
namespace {

using testing::DeviceArray;

enum class Dist { kUniform, kTies, kZerosAndTies, kNarrow, kAllEqual, kSpecials, kAllNegInf, kRealLike };

std::vector<float> MakeRow(Dist d, int len, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(len);
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < len; ++i) {
    switch (d) {
      case Dist::kUniform: v[i] = 10.0f * rng.Symmetric(); break;
      case Dist::kTies: v[i] = static_cast<float>(rng.Below(5)); break;  // 5 distinct values
      case Dist::kZerosAndTies:  // relu-like: many +0 and -0, a few tied positives
        v[i] = rng.Below(3) == 0 ? (rng.Below(2) ? 0.0f : -0.0f) : static_cast<float>(rng.Below(40)) * 0.25f;
        break;
      case Dist::kNarrow: v[i] = 1.0f + rng.Uniform(); break;  // one exponent: huge top-level buckets
      case Dist::kAllEqual: v[i] = 3.5f; break;
      case Dist::kSpecials: {
        const uint64_t r = rng.Below(16);
        v[i] = r == 0 ? ninf : r == 1 ? std::numeric_limits<float>::quiet_NaN()
                       : r == 2 ? std::numeric_limits<float>::infinity()
                                : 5.0f * rng.Symmetric();
        break;
      }
      case Dist::kAllNegInf: v[i] = ninf; break;
      case Dist::kRealLike: {
        // Sum of relu'd weighted dot products over 32 heads, as the indexer makes.
        float s = 0;
        for (int h = 0; h < 32; ++h) s += std::max(0.0f, rng.Symmetric() + 0.3f) * (0.02f + 0.01f * rng.Uniform());
        v[i] = s * (i % 997 == 0 ? 3.0f : 1.0f);
        break;
      }
    }
  }
  return v;
}

struct TopKCase {
  Dist dist;
  int len;
  int k;
  int rows;
};

std::string Name(const ::testing::TestParamInfo<TopKCase>& info) {
  static const char* names[] = {"Uniform", "Ties", "ZerosAndTies", "Narrow", "AllEqual", "Specials", "AllNegInf",
                                "RealLike"};
  return std::string(names[static_cast<int>(info.param.dist)]) + "_len" + std::to_string(info.param.len) + "_k" +
         std::to_string(info.param.k) + "_rows" + std::to_string(info.param.rows);
}

class TopKTest : public ::testing::TestWithParam<TopKCase> {};

TEST_P(TopKTest, MatchesReferenceExactly) {
  SPAR_REQUIRE_GPU();
  const TopKCase c = GetParam();
  const int stride = c.len + 5, out_stride = c.k + 3;
  // Rows have ragged lengths (len, len - 1, len - 63, ...) and start offsets.
  std::vector<float> logits(static_cast<size_t>(c.rows) * stride, 123.0f);  // outside the rows: large decoys
  std::vector<int32_t> start(c.rows), len(c.rows);
  for (int r = 0; r < c.rows; ++r) {
    start[r] = r % 3;
    len[r] = std::max(0, c.len - start[r] - (r * 63) % 97);
    const std::vector<float> row = MakeRow(c.dist, len[r], 1000 + r + c.len);
    for (int i = 0; i < len[r]; ++i) logits[static_cast<size_t>(r) * stride + start[r] + i] = row[i];
  }
  DeviceArray<float> d_logits;
  d_logits.Upload(logits);
  DeviceArray<int32_t> d_start, d_len, d_out(static_cast<size_t>(c.rows) * out_stride);
  d_start.Upload(start);
  d_len.Upload(len);
  d_out.Poison();
  TopKParams p;
  p.rows = c.rows;
  p.k = c.k;
  p.logits = d_logits.get();
  p.logits_stride = stride;
  p.row_start = d_start.get();
  p.row_len = d_len.get();
  p.num_cols = c.len;
  p.out = d_out.get();
  p.out_stride = out_stride;
  ASSERT_TRUE(TopKSupported(p));
  ASSERT_TRUE(LaunchTopK(p, nullptr).ok());
  SPAR_ASSERT_CUDA(cudaGetLastError());
  SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
  const std::vector<int32_t> got = d_out.Download();
  std::vector<int32_t> want(c.k);
  int selected = 0;
  for (int r = 0; r < c.rows; ++r) {
    ref::TopK(logits.data() + static_cast<size_t>(r) * stride + start[r], len[r], c.k, want.data());
    for (int i = 0; i < c.k; ++i) {
      selected += want[i] >= 0;
      ASSERT_EQ(got[static_cast<size_t>(r) * out_stride + i], want[i]) << "row " << r << " slot " << i;
    }
    for (int i = c.k; i < out_stride; ++i) ASSERT_EQ(got[static_cast<size_t>(r) * out_stride + i], -1);  // poison kept
  }
  if (c.dist != Dist::kAllNegInf && c.len > 0) {
    EXPECT_GT(selected, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, TopKTest,
    ::testing::Values(TopKCase{Dist::kUniform, 131072, 2048, 4}, TopKCase{Dist::kUniform, 32768, 2048, 1},
                      TopKCase{Dist::kUniform, 200000, 2048, 1}, TopKCase{Dist::kUniform, 2049, 2048, 3},
                      TopKCase{Dist::kUniform, 2047, 2048, 2}, TopKCase{Dist::kUniform, 5000, 1, 2},
                      TopKCase{Dist::kUniform, 5000, 100, 2}, TopKCase{Dist::kTies, 131072, 2048, 2},
                      TopKCase{Dist::kTies, 4000, 2048, 2}, TopKCase{Dist::kZerosAndTies, 65536, 2048, 2},
                      TopKCase{Dist::kNarrow, 131072, 2048, 2}, TopKCase{Dist::kAllEqual, 70000, 2048, 1},
                      TopKCase{Dist::kSpecials, 50000, 2048, 2}, TopKCase{Dist::kSpecials, 2100, 2048, 2},
                      TopKCase{Dist::kAllNegInf, 9000, 2048, 1}, TopKCase{Dist::kRealLike, 131072, 2048, 3},
                      TopKCase{Dist::kRealLike, 3000, 777, 2}, TopKCase{Dist::kUniform, 0, 2048, 1}),
    Name);

TEST(TopK, TranslatesPositionsToCacheSlots) {
  SPAR_REQUIRE_GPU();
  const int rows = 4, rows_per_seq = 2, len = 5000, k = 2048, tstride = 100;
  std::vector<float> logits(rows * len);
  for (int r = 0; r < rows; ++r) {
    const std::vector<float> row = MakeRow(Dist::kUniform, len, 50 + r);
    std::copy(row.begin(), row.end(), logits.begin() + r * len);
  }
  std::vector<int32_t> table(2 * tstride);
  for (int i = 0; i < 2 * tstride; ++i) table[i] = (i * 37) % 500;
  DeviceArray<float> d_logits;
  d_logits.Upload(logits);
  DeviceArray<int32_t> d_table, d_out(rows * k);
  d_table.Upload(table);
  d_out.Poison();
  TopKParams p;
  p.rows = rows;
  p.k = k;
  p.logits = d_logits.get();
  p.logits_stride = len;
  p.num_cols = len;
  p.out = d_out.get();
  p.out_stride = k;
  p.block_table = d_table.get();
  p.block_table_stride = tstride;
  p.rows_per_seq = rows_per_seq;
  ASSERT_TRUE(LaunchTopK(p, nullptr).ok());
  SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
  const std::vector<int32_t> got = d_out.Download();
  std::vector<int32_t> want(k);
  for (int r = 0; r < rows; ++r) {
    ref::TopK(logits.data() + r * len, len, k, want.data());
    const int32_t* t = table.data() + (r / rows_per_seq) * tstride;
    for (int i = 0; i < k; ++i) {
      ASSERT_EQ(got[r * k + i], t[want[i] / 64] * 64 + want[i] % 64) << "row " << r << " slot " << i;
    }
  }
}

TEST(TopK, RejectsBadParams) {
  TopKParams p;
  p.rows = 1;
  p.k = 4096;
  EXPECT_FALSE(TopKSupported(p));
  const absl::Status s = LaunchTopK(p, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("k"), absl::string_view::npos);
}

}  // namespace
}  // namespace spar
