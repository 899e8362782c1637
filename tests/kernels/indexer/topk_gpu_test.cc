// Top-k against ref::TopK: the outputs must be identical (same set, same
// ascending order, same -1 padding), on uniform, heavily tied, real-like
// (indexer logits), NaN / -inf sprinkled and degenerate rows, through both
// paths: one CTA per row (no workspace, or split_chunks = 1) and split rows
// (the planner's choice and forced chunk counts whose cuts land at odd
// places of ragged rows). Workspaces start as garbage and outputs poisoned
// with a value no slot may keep, so missing zeroing or writes show.
#include <cmath>
#include <limits>
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

struct TopKCase {
  Dist dist;
  int len;
  int k;
  int rows;
};

constexpr int32_t kOutPoison = 0x7f7f7f7f;  // never a position, never -1
constexpr int kNoWorkspace = -1;            // chunks value: LaunchTopK without a workspace

// Launches top-k with `chunks` as split_chunks (0: the planner's choice) and
// a garbage-filled workspace of TopKWorkspaceBytes, or none for kNoWorkspace.
absl::Status RunTopK(TopKParams p, int chunks, cudaStream_t stream, DeviceArray<uint8_t>* ws) {
  if (chunks != kNoWorkspace) {
    p.split_chunks = chunks;
    const size_t bytes = TopKWorkspaceBytes(p);
    if (bytes > 0) {
      ws->Resize(bytes);
      EXPECT_EQ(cudaMemset(ws->get(), 0xa5, bytes), cudaSuccess);
      p.workspace = ws->get();
      p.workspace_bytes = bytes;
    }
  }
  return LaunchTopK(p, stream);
}

using TopKParam = std::tuple<TopKCase, int>;

std::string Name(const ::testing::TestParamInfo<TopKParam>& info) {
  static const char* names[] = {"Uniform", "Ties", "ZerosAndTies", "Narrow", "AllEqual", "Specials", "AllNegInf",
                                "RealLike"};
  const TopKCase& c = std::get<0>(info.param);
  const int chunks = std::get<1>(info.param);
  return std::string(names[static_cast<int>(c.dist)]) + "_len" + std::to_string(c.len) + "_k" + std::to_string(c.k) +
         "_rows" + std::to_string(c.rows) +
         (chunks == kNoWorkspace ? "_noworkspace" : chunks == 0 ? "_planned" : "_chunks" + std::to_string(chunks));
}

class TopKTest : public ::testing::TestWithParam<TopKParam> {};

TEST_P(TopKTest, MatchesReferenceExactly) {
  SPAR_REQUIRE_GPU();
  const TopKCase c = std::get<0>(GetParam());
  const int chunks = std::get<1>(GetParam());
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
  SPAR_ASSERT_CUDA(cudaMemset(d_out.get(), 0x7f, d_out.bytes()));
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
  DeviceArray<uint8_t> ws;
  const absl::Status st = RunTopK(p, chunks, nullptr, &ws);
  ASSERT_TRUE(st.ok()) << st;
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
    for (int i = c.k; i < out_stride; ++i) ASSERT_EQ(got[static_cast<size_t>(r) * out_stride + i], kOutPoison);
  }
  if (c.dist != Dist::kAllNegInf && c.len > 0) {
    EXPECT_GT(selected, 0);
  }
}

const TopKCase kCases[] = {
    {Dist::kUniform, 131072, 2048, 4},
    {Dist::kUniform, 32768, 2048, 1},
    {Dist::kUniform, 200000, 2048, 1},
    {Dist::kUniform, 2049, 2048, 3},
    {Dist::kUniform, 2047, 2048, 2},
    {Dist::kUniform, 5000, 1, 2},
    {Dist::kUniform, 5000, 100, 2},
    {Dist::kTies, 131072, 2048, 2},
    {Dist::kTies, 4000, 2048, 2},
    {Dist::kZerosAndTies, 65536, 2048, 2},
    {Dist::kNarrow, 131072, 2048, 2},
    {Dist::kAllEqual, 70000, 2048, 1},
    {Dist::kSpecials, 50000, 2048, 2},
    {Dist::kSpecials, 2100, 2048, 2},
    {Dist::kAllNegInf, 9000, 2048, 1},
    {Dist::kRealLike, 131072, 2048, 3},
    {Dist::kRealLike, 3000, 777, 2},
    {Dist::kUniform, 0, 2048, 1},
    {Dist::kRealLike, 32768, 2048, 1},
    {Dist::kTies, 9999, 1, 3},
    {Dist::kUniform, 262144, 2048, 1},
    // Short rows (<= kTopKShortMaxLen: the short-row path unless forced):
    // every keys-per-thread variant and its boundaries, ties deciding at the
    // threshold, decode batches.
    {Dist::kAllEqual, 3000, 2048, 2},
    {Dist::kNarrow, 8192, 2048, 3},
    {Dist::kZerosAndTies, 8192, 2048, 2},
    {Dist::kSpecials, 32768, 2048, 2},
    {Dist::kUniform, 1, 1, 1},
    {Dist::kUniform, 1025, 1000, 2},
    {Dist::kTies, 16384, 2048, 2},
    {Dist::kTies, 16385, 2048, 1},
    {Dist::kRealLike, 8192, 2048, 64},
    {Dist::kAllNegInf, 4096, 2048, 1},
    // The 6- and 12-keys-per-thread variants at their bounds (a decode step
    // just past 4K / 8K positions).
    {Dist::kRealLike, 4097, 2048, 2},
    {Dist::kTies, 6144, 2048, 2},
    {Dist::kRealLike, 8193, 2048, 4},
    {Dist::kZerosAndTies, 12288, 2048, 2},
};

// One CTA per row (both ways), the planner's choice, and odd forced cuts.
INSTANTIATE_TEST_SUITE_P(Cases, TopKTest,
                         ::testing::Combine(::testing::ValuesIn(kCases), ::testing::Values(kNoWorkspace, 1, 0, 3, 7)),
                         Name);

class TopKSlotsTest : public ::testing::TestWithParam<int> {};

// Positions written as cache slots, each row's sequence either row /
// rows_per_seq or token_seq[row] (the engine's map, here not monotonic); row
// 1 has fewer valid entries than k (every valid one taken, then -1).
TEST_P(TopKSlotsTest, TranslatesPositionsToCacheSlots) {
  SPAR_REQUIRE_GPU();
  const int rows = 4, rows_per_seq = 2, len = 5000, k = 2048, tstride = 100;
  const std::vector<int32_t> row_len = {5000, 1500, 4097, 5000}, token_seq = {1, 0, 1, 1};
  std::vector<float> logits(rows * len);
  for (int r = 0; r < rows; ++r) {
    const std::vector<float> row = MakeRow(Dist::kUniform, len, 50 + r);
    std::copy(row.begin(), row.end(), logits.begin() + r * len);
  }
  std::vector<int32_t> table(2 * tstride);
  for (int i = 0; i < 2 * tstride; ++i) table[i] = (i * 37) % 500;
  DeviceArray<float> d_logits;
  d_logits.Upload(logits);
  DeviceArray<int32_t> d_table, d_seq, d_len;
  d_table.Upload(table);
  d_seq.Upload(token_seq);
  d_len.Upload(row_len);
  for (bool by_token_seq : {false, true}) {
    SCOPED_TRACE(by_token_seq ? "token_seq" : "rows_per_seq");
    DeviceArray<int32_t> d_out(rows * k);
    d_out.Poison();
    TopKParams p;
    p.rows = rows;
    p.k = k;
    p.logits = d_logits.get();
    p.logits_stride = len;
    p.row_len = d_len.get();
    p.num_cols = len;
    p.out = d_out.get();
    p.out_stride = k;
    p.block_table = d_table.get();
    p.block_table_stride = tstride;
    p.rows_per_seq = rows_per_seq;
    if (by_token_seq) p.token_seq = d_seq.get();
    DeviceArray<uint8_t> ws;
    ASSERT_TRUE(RunTopK(p, GetParam(), nullptr, &ws).ok());
    SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<int32_t> got = d_out.Download();
    std::vector<int32_t> want(k);
    for (int r = 0; r < rows; ++r) {
      ref::TopK(logits.data() + r * len, row_len[r], k, want.data());
      const int32_t* t = table.data() + (by_token_seq ? token_seq[r] : r / rows_per_seq) * tstride;
      for (int i = 0; i < k; ++i) {
        const int32_t expect = want[i] < 0 ? -1 : t[want[i] / 64] * 64 + want[i] % 64;
        ASSERT_EQ(got[r * k + i], expect) << "row " << r << " entry " << i;
      }
    }
  }
}

// Decode rows (no row_start: read up to num_cols, masked by row_len) whose
// threshold bucket holds a few keys, so one warp ranks them: ties inside the
// bucket decided by position (row 0: 3 keys above the tie, 4 of 5 tied keys
// taken; row 1: 8 of 20 tied keys, the whole bucket one value), and a row
// shorter than num_cols with huge decoys past its length (row 2).
TEST(TopK, ShortRowsFinishSmallBucketsInOneWarp) {
  SPAR_REQUIRE_GPU();
  const int rows = 3, num_cols = 8192, k = 2048, tstride = 130;
  const std::vector<int32_t> row_len = {8192, 8100, 7000};
  std::vector<float> logits(static_cast<size_t>(rows) * num_cols);
  Rng rng(77);
  for (int r = 0; r < rows; ++r) {
    std::vector<float> v;
    const int above = r == 0 ? 2041 : 2040;
    for (int i = 0; i < above; ++i) v.push_back(2.0f + 1.9f * rng.Uniform());  // [2, 4): a higher top digit
    if (r == 0) {
      for (int i = 0; i < 3; ++i) v.push_back(0.75f);
      for (int i = 0; i < 5; ++i) v.push_back(0.625f);
    }
    for (int i = 0; i < 20; ++i) v.push_back(0.5f);  // [0.5, 1): one top digit with the two above
    while (static_cast<int>(v.size()) < row_len[r]) v.push_back(0.01f + 0.08f * rng.Uniform());  // below
    for (int i = static_cast<int>(v.size()) - 1; i > 0; --i) std::swap(v[i], v[rng.Below(i + 1)]);
    for (int i = 0; i < num_cols; ++i) logits[static_cast<size_t>(r) * num_cols + i] = i < row_len[r] ? v[i] : 1e30f;
  }
  std::vector<int32_t> table(rows * tstride);
  for (int i = 0; i < rows * tstride; ++i) table[i] = (i * 53) % 1000;
  DeviceArray<float> d_logits;
  d_logits.Upload(logits);
  DeviceArray<int32_t> d_table, d_len, d_out(rows * k);
  d_table.Upload(table);
  d_len.Upload(row_len);
  d_out.Poison();
  TopKParams p;
  p.rows = rows;
  p.k = k;
  p.logits = d_logits.get();
  p.logits_stride = num_cols;
  p.row_len = d_len.get();
  p.num_cols = num_cols;
  p.out = d_out.get();
  p.out_stride = k;
  p.block_table = d_table.get();
  p.block_table_stride = tstride;
  ASSERT_TRUE(LaunchTopK(p, nullptr).ok());
  SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
  const std::vector<int32_t> got = d_out.Download();
  std::vector<int32_t> want(k);
  for (int r = 0; r < rows; ++r) {
    ref::TopK(logits.data() + static_cast<size_t>(r) * num_cols, row_len[r], k, want.data());
    int ties = 0;
    for (int i = 0; i < k; ++i) {
      ASSERT_GE(want[i], 0);
      ties += logits[static_cast<size_t>(r) * num_cols + want[i]] == (r == 0 ? 0.625f : 0.5f);
      const int32_t slot = table[r * tstride + want[i] / 64] * 64 + want[i] % 64;
      ASSERT_EQ(got[r * k + i], slot) << "row " << r << " entry " << i;
    }
    EXPECT_EQ(ties, r == 0 ? 4 : 8) << "row " << r << ": the reference itself picks part of the tie";
  }
  // The loads stop at num_cols, which must fit the rows.
  p.logits_stride = num_cols - 1;
  EXPECT_EQ(LaunchTopK(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

// Refused before anything touches the pointers (host memory here): runs
// without a GPU.
TEST(TopKParamsCheck, RefusesATokenSeqWithoutABlockTable) {
  std::vector<float> logits(64);
  std::vector<int32_t> out(64), seq(1);
  TopKParams p;
  p.rows = 1;
  p.k = 8;
  p.logits = logits.data();
  p.logits_stride = 64;
  p.num_cols = 64;
  p.out = out.data();
  p.out_stride = 64;
  p.token_seq = seq.data();
  const absl::Status st = LaunchTopK(p, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("token_seq"), std::string::npos) << st;
}

INSTANTIATE_TEST_SUITE_P(Paths, TopKSlotsTest, ::testing::Values(kNoWorkspace, 0, 3));

// The split path captured in a CUDA graph: no host sync or allocation inside,
// and each replay starts from its own zeroed histograms (the second replay
// runs on different logits and must not see the first one's counts).
TEST(TopK, SplitPathReplaysFromACudaGraph) {
  SPAR_REQUIRE_GPU();
  const int rows = 3, len = 40000, k = 2048;
  DeviceArray<float> d_logits(static_cast<size_t>(rows) * len);
  DeviceArray<int32_t> d_out(static_cast<size_t>(rows) * k);
  TopKParams p;
  p.rows = rows;
  p.k = k;
  p.logits = d_logits.get();
  p.logits_stride = len;
  p.num_cols = len;
  p.out = d_out.get();
  p.out_stride = k;
  p.split_chunks = 5;
  const size_t bytes = TopKWorkspaceBytes(p);
  ASSERT_GT(bytes, 0u);
  DeviceArray<uint8_t> ws(bytes);
  SPAR_ASSERT_CUDA(cudaMemset(ws.get(), 0xa5, bytes));
  p.workspace = ws.get();
  p.workspace_bytes = bytes;
  testing::ExpectGraphReplaysMatchReference(p, d_logits, d_out);
}

// The cuda backend plans once per step and passes its plan: the launcher
// must follow it (a row-group plan needs the workspace it sizes; a one-CTA
// plan for short rows takes the short-row path) and refuse one that does not
// cover the row.
TEST(TopK, FollowsTheCallersPlan) {
  SPAR_REQUIRE_GPU();
  for (const int len : {8192, 100000}) {
    const int rows = 2, k = 2048;
    std::vector<float> logits(static_cast<size_t>(rows) * len);
    for (int r = 0; r < rows; ++r) {
      const std::vector<float> row = MakeRow(Dist::kRealLike, len, 90 + r);
      std::copy(row.begin(), row.end(), logits.begin() + static_cast<size_t>(r) * len);
    }
    DeviceArray<float> d_logits;
    d_logits.Upload(logits);
    DeviceArray<int32_t> d_out(static_cast<size_t>(rows) * k);
    d_out.Poison();
    TopKParams p;
    p.rows = rows;
    p.k = k;
    p.logits = d_logits.get();
    p.logits_stride = len;
    p.num_cols = len;
    p.out = d_out.get();
    p.out_stride = k;
    int sms = 0;
    SPAR_ASSERT_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const TopKSplitPlan plan = PlanTopKSplit(rows, len, sms);
    EXPECT_EQ(plan.group(), len > kTopKShortMaxLen);  // 2 rows x 25 chunks of 8 keys per thread
    EXPECT_FALSE(plan.split());
    p.plan = &plan;
    DeviceArray<uint8_t> ws;
    const size_t bytes = TopKWorkspaceBytes(p);
    EXPECT_EQ(bytes, TopKGroupWorkspaceLayout(plan, rows).total);
    if (bytes > 0) {
      ws.Resize(bytes);
      p.workspace = ws.get();
      p.workspace_bytes = bytes;
    }
    ASSERT_TRUE(LaunchTopK(p, nullptr).ok());
    SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<int32_t> got = d_out.Download();
    std::vector<int32_t> want(k);
    for (int r = 0; r < rows; ++r) {
      ref::TopK(logits.data() + static_cast<size_t>(r) * len, len, k, want.data());
      for (int i = 0; i < k; ++i) ASSERT_EQ(got[static_cast<size_t>(r) * k + i], want[i]) << "len " << len;
    }
    if (plan.group()) {
      TopKSplitPlan short_cover = plan;
      short_cover.chunks = 2;  // covers 2 chunks only: not this row
      p.plan = &short_cover;
      EXPECT_EQ(LaunchTopK(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
    }
  }
}

TEST(TopK, RejectsATooSmallWorkspace) {
  SPAR_REQUIRE_GPU();
  DeviceArray<float> d_logits(65536);
  DeviceArray<int32_t> d_out(2048);
  DeviceArray<uint8_t> ws(256);
  TopKParams p;
  p.rows = 1;
  p.k = 2048;
  p.logits = d_logits.get();
  p.logits_stride = 65536;
  p.num_cols = 65536;
  p.out = d_out.get();
  p.out_stride = 2048;
  p.split_chunks = 4;
  ASSERT_GT(TopKWorkspaceBytes(p), 256u);
  p.workspace = ws.get();
  p.workspace_bytes = 256;
  const absl::Status s = LaunchTopK(p, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("workspace_bytes"), absl::string_view::npos);
  p.split_chunks = -2;
  EXPECT_EQ(LaunchTopK(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
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
