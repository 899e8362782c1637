// The row-group top-k path (topk_group.cu) against ref::TopK, forced
// through the caller's plan (TopKGroupPlan) with each keys-per-thread
// variant: outputs identical to the reference (set, ascending order, -1
// padding) on every distribution, ragged rows with start offsets, rows
// with fewer valid keys than k, ties at the threshold spread over several
// chunks (the earlier chunks' ties come first), the list finish and the
// four-level finish, cache slots through a block table, and replays of a
// captured graph (each starts from zeroed barrier counters). Workspaces
// start as garbage and outputs poisoned.
#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "kernels/cuda/indexer/indexer.h"
#include "kernels/cuda/indexer/topk_plan.h"
#include "kernels/ref/topk_ref.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/kernels/indexer/topk_test_util.h"

namespace spar {
namespace {

using testing::DeviceArray;
using testing::Dist;
using testing::MakeRow;

constexpr int32_t kOutPoison = 0x7f7f7f7f;
constexpr int kMaxGroupCtas = 108;  // rows x chunks an A100 holds at one CTA per SM

struct Rows {
  std::vector<float> logits;  // [rows][stride]
  std::vector<int32_t> start, len;
  int stride = 0;
};

// Launches the group plan of p's rows (garbage workspace) and checks every
// row against the reference; table (optional) maps positions to slots per
// row's sequence = row.
void ExpectMatchesReference(TopKParams p, int keys, const Rows& rows, const std::vector<int32_t>* table = nullptr,
                            int table_stride = 0) {
  const TopKSplitPlan plan = TopKGroupPlan(p.rows, p.num_cols, keys);
  ASSERT_TRUE(plan.group());
  ASSERT_LE(p.rows * plan.chunks, kMaxGroupCtas);
  p.plan = &plan;
  const size_t bytes = TopKWorkspaceBytes(p);
  ASSERT_EQ(bytes, TopKGroupWorkspaceLayout(plan, p.rows).total);
  DeviceArray<uint8_t> ws(bytes);
  SPAR_ASSERT_CUDA(cudaMemset(ws.get(), 0xa5, bytes));
  p.workspace = ws.get();
  p.workspace_bytes = bytes;
  DeviceArray<int32_t> d_out(static_cast<size_t>(p.rows) * p.out_stride);
  SPAR_ASSERT_CUDA(cudaMemset(d_out.get(), 0x7f, d_out.bytes()));
  p.out = d_out.get();
  const absl::Status st = LaunchTopK(p, nullptr);
  ASSERT_TRUE(st.ok()) << st;
  SPAR_ASSERT_CUDA(cudaGetLastError());
  SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
  const std::vector<int32_t> got = d_out.Download();
  std::vector<int32_t> want(p.k);
  for (int64_t r = 0; r < p.rows; ++r) {
    const int start = rows.start.empty() ? 0 : rows.start[r];
    ref::TopK(rows.logits.data() + r * rows.stride + start, rows.len[r], p.k, want.data());
    for (int i = 0; i < p.k; ++i) {
      int32_t expect = want[i];
      if (table != nullptr && expect >= 0) expect = (*table)[r * table_stride + expect / 64] * 64 + expect % 64;
      ASSERT_EQ(got[r * p.out_stride + i], expect) << "row " << r << " slot " << i;
    }
    for (int64_t i = p.k; i < p.out_stride; ++i) ASSERT_EQ(got[r * p.out_stride + i], kOutPoison);
  }
}

struct GroupCase {
  Dist dist;
  int len;
  int k;
  int rows;
};

using GroupParam = std::tuple<GroupCase, int>;

class TopKGroupTest : public ::testing::TestWithParam<GroupParam> {};

// Ragged rows (len, len - 1 - 63, ...) with start offsets 0..2, large decoys
// outside them.
TEST_P(TopKGroupTest, MatchesReferenceExactly) {
  SPAR_REQUIRE_GPU();
  const GroupCase c = std::get<0>(GetParam());
  const int keys = std::get<1>(GetParam());
  Rows rows;
  rows.stride = c.len + 5;
  rows.logits.assign(static_cast<size_t>(c.rows) * rows.stride, 123.0f);
  rows.start.resize(c.rows);
  rows.len.resize(c.rows);
  for (int r = 0; r < c.rows; ++r) {
    rows.start[r] = r % 3;
    rows.len[r] = std::max(0, c.len - rows.start[r] - (r * 63) % 97);
    const std::vector<float> row = MakeRow(c.dist, rows.len[r], 2000 + r + c.len);
    std::copy(row.begin(), row.end(), rows.logits.begin() + static_cast<size_t>(r) * rows.stride + rows.start[r]);
  }
  DeviceArray<float> d_logits;
  d_logits.Upload(rows.logits);
  DeviceArray<int32_t> d_start, d_len;
  d_start.Upload(rows.start);
  d_len.Upload(rows.len);
  TopKParams p;
  p.rows = c.rows;
  p.k = c.k;
  p.logits = d_logits.get();
  p.logits_stride = rows.stride;
  p.row_start = d_start.get();
  p.row_len = d_len.get();
  p.num_cols = c.len;
  p.out_stride = c.k + 3;
  ExpectMatchesReference(p, keys, rows);
  // Again with counters the caller keeps between launches (no memset):
  // twice, the second launch finding them as the first left them (zero).
  DeviceArray<uint32_t> counters(kTopKMaxRowCounters);
  SPAR_ASSERT_CUDA(cudaMemset(counters.get(), 0, counters.bytes()));
  p.row_counters = counters.get();
  p.row_counters_capacity = kTopKMaxRowCounters;
  for (int launch = 0; launch < 2; ++launch) {
    ExpectMatchesReference(p, keys, rows);
    const std::vector<uint32_t> left = counters.Download();
    for (int64_t r = 0; r < kTopKMaxRowCounters; ++r) ASSERT_EQ(left[r], 0u) << "counter " << r << ", launch " << launch;
  }
}

const GroupCase kGroupCases[] = {
    {Dist::kRealLike, 32768, 2048, 1},    // the decode target shape
    {Dist::kRealLike, 131072, 2048, 2},   // long rows: 16 keys per thread
    {Dist::kUniform, 40000, 2048, 2},     // a partial last chunk
    {Dist::kUniform, 20000, 100, 3},
    {Dist::kUniform, 17000, 1, 1},
    {Dist::kTies, 30000, 2048, 2},        // 5 values: every level, ties decided by position
    {Dist::kZerosAndTies, 24576, 2048, 2},
    {Dist::kNarrow, 50000, 2048, 1},      // one exponent: big top buckets
    {Dist::kAllEqual, 33000, 2048, 1},    // all four levels, every key tied
    {Dist::kSpecials, 30000, 2048, 2},    // NaN / +-inf
    {Dist::kAllNegInf, 20000, 2048, 1},   // no valid key: all -1
    {Dist::kUniform, 3000, 2048, 2},      // fewer valid keys than k: all taken
    {Dist::kRealLike, 2047, 2048, 1},
    {Dist::kRealLike, 200000, 2048, 1},
};

std::vector<GroupParam> Fitting() {
  std::vector<GroupParam> out;
  for (const GroupCase& c : kGroupCases) {
    for (int keys : kTopKGroupKeyOptions) {
      const TopKSplitPlan plan = TopKGroupPlan(c.rows, c.len, keys);
      if (plan.group() && c.rows * plan.chunks <= kMaxGroupCtas) out.emplace_back(c, keys);
    }
  }
  return out;
}

std::string Name(const ::testing::TestParamInfo<GroupParam>& info) {
  static const char* names[] = {"Uniform", "Ties", "ZerosAndTies", "Narrow", "AllEqual", "Specials", "AllNegInf",
                                "RealLike"};
  const GroupCase& c = std::get<0>(info.param);
  return std::string(names[static_cast<int>(c.dist)]) + "_len" + std::to_string(c.len) + "_k" + std::to_string(c.k) +
         "_rows" + std::to_string(c.rows) + "_keys" + std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Cases, TopKGroupTest, ::testing::ValuesIn(Fitting()), Name);

TEST(TopKGroup, EveryKeysVariantHasCases) {
  for (int keys : kTopKGroupKeyOptions) {
    int n = 0;
    for (const GroupParam& g : Fitting()) n += std::get<1>(g) == keys;
    EXPECT_GE(n, 8) << keys << " keys per thread";
  }
}

// Decode rows (no row_start: loaded up to num_cols, masked by row_len) whose
// threshold ties are spread over every chunk: 2000 keys in a higher top
// digit, then `tied` copies of 0.5 at evenly spaced positions of which the
// row takes 48 (the lowest positions), the rest below. Row 0's bucket fits
// the list (64 tied keys), row 1's does not (600: every level runs). Slots
// through a block table, huge decoys past each row's length.
TEST(TopKGroup, TiesAcrossChunksGoToTheLowestPositions) {
  SPAR_REQUIRE_GPU();
  const int num_cols = 32768, k = 2048, tstride = num_cols / 64 + 1;
  const std::vector<int32_t> row_len = {32768, 30001};
  const int n_rows = 2;
  for (int keys : kTopKGroupKeyOptions) {
    SCOPED_TRACE(keys);
    Rows rows;
    rows.stride = num_cols;
    rows.len = row_len;
    rows.logits.assign(static_cast<size_t>(n_rows) * num_cols, 1e30f);
    Rng rng(300 + keys);
    for (int r = 0; r < n_rows; ++r) {
      const int tied = r == 0 ? 64 : 600;
      float* row = rows.logits.data() + static_cast<size_t>(r) * num_cols;
      for (int i = 0; i < row_len[r]; ++i) row[i] = 0.01f + 0.08f * rng.Uniform();
      for (int t = 0; t < tied; ++t) row[static_cast<int64_t>(t) * row_len[r] / tied] = 0.5f;
      for (int placed = 0; placed < 2000;) {
        const int i = static_cast<int>(rng.Below(row_len[r]));
        if (row[i] == 0.5f || row[i] >= 2.0f) continue;
        row[i] = 2.0f + 1.9f * rng.Uniform();
        ++placed;
      }
    }
    std::vector<int32_t> table(n_rows * tstride);
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>((i * 53) % 2000);
    DeviceArray<float> d_logits;
    d_logits.Upload(rows.logits);
    DeviceArray<int32_t> d_table, d_len;
    d_table.Upload(table);
    d_len.Upload(row_len);
    TopKParams p;
    p.rows = n_rows;
    p.k = k;
    p.logits = d_logits.get();
    p.logits_stride = num_cols;
    p.row_len = d_len.get();
    p.num_cols = num_cols;
    p.out_stride = k;
    p.block_table = d_table.get();
    p.block_table_stride = tstride;
    ExpectMatchesReference(p, keys, rows, &table, tstride);
    // The reference itself takes 48 of the ties, the lowest positions.
    std::vector<int32_t> want(k);
    ref::TopK(rows.logits.data(), row_len[0], k, want.data());
    EXPECT_EQ(std::count_if(want.begin(), want.end(), [&](int32_t i) { return i >= 0 && rows.logits[i] == 0.5f; }),
              48);
  }
}

// A captured graph replayed twice on different rows: each replay zeroes the
// barrier counters itself (the second would pass its barriers at once on the
// first one's counts otherwise) and the cooperative launch is a graph node.
TEST(TopKGroup, ReplaysFromACudaGraph) {
  SPAR_REQUIRE_GPU();
  const int n_rows = 3, len = 40000, k = 2048;
  const TopKSplitPlan plan = TopKGroupPlan(n_rows, len, 8);
  ASSERT_TRUE(plan.group());
  DeviceArray<float> d_logits(static_cast<size_t>(n_rows) * len);
  DeviceArray<int32_t> d_out(static_cast<size_t>(n_rows) * k);
  TopKParams p;
  p.rows = n_rows;
  p.k = k;
  p.logits = d_logits.get();
  p.logits_stride = len;
  p.num_cols = len;
  p.out = d_out.get();
  p.out_stride = k;
  p.plan = &plan;
  const size_t bytes = TopKWorkspaceBytes(p);
  DeviceArray<uint8_t> ws(bytes);
  SPAR_ASSERT_CUDA(cudaMemset(ws.get(), 0xa5, bytes));
  p.workspace = ws.get();
  p.workspace_bytes = bytes;
  testing::ExpectGraphReplaysMatchReference(p, d_logits, d_out);
  // With kept counters the graph holds no memset: each replay must leave
  // them at zero for the next.
  DeviceArray<uint32_t> counters(kTopKMaxRowCounters);
  SPAR_ASSERT_CUDA(cudaMemset(counters.get(), 0, counters.bytes()));
  p.row_counters = counters.get();
  p.row_counters_capacity = kTopKMaxRowCounters;
  testing::ExpectGraphReplaysMatchReference(p, d_logits, d_out);
  const std::vector<uint32_t> left = counters.Download();
  for (int r = 0; r < n_rows; ++r) EXPECT_EQ(left[r], 0u) << "row " << r;
}

// A plan that is not TopKGroupPlan's (chunk length off) or that does not
// cover the row is refused; runs without a GPU (host pointers, refused first).
TEST(TopKGroupParamsCheck, RefusesAPlanThatIsNotAGroupPlan) {
  std::vector<float> logits(40000);
  std::vector<int32_t> out(2048);
  TopKParams p;
  p.rows = 1;
  p.k = 2048;
  p.logits = logits.data();
  p.logits_stride = 40000;
  p.num_cols = 40000;
  p.out = out.data();
  p.out_stride = 2048;
  TopKSplitPlan plan = TopKGroupPlan(1, 40000, 8);
  ASSERT_TRUE(plan.group());
  plan.chunk_len = 4096 + 1024;
  p.plan = &plan;
  EXPECT_EQ(LaunchTopK(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  plan = TopKGroupPlan(1, 40000, 8);
  plan.chunks = 2;
  EXPECT_EQ(LaunchTopK(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  plan = TopKGroupPlan(1, 40000, 8);
  plan.group_keys = 5;  // no such kernel
  plan.chunk_len = 5 * kTopKGroupThreads;
  const absl::Status st = LaunchTopK(p, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("plan"), std::string::npos) << st;
}

}  // namespace
}  // namespace spar
