// The top-k work split (host only): few long rows take the row group (or
// are cut into chunks that fill the GPU), many rows keep one CTA each (the
// measured crossovers), chunks cover the row in whole bitmap words, forced
// splits are honored, and the workspace layouts hold every piece at 16-byte
// alignment.
#include "kernels/cuda/indexer/topk_plan.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace spar {
namespace {

constexpr int kH200Sms = 132, kA100Sms = 108;

void ExpectCovers(const TopKSplitPlan& p, int64_t cols) {
  ASSERT_TRUE(p.split());
  EXPECT_EQ(p.chunk_len % kTopKChunkAlign, 0);
  EXPECT_GE(p.chunks * p.chunk_len, cols);        // every position has a chunk
  EXPECT_LT((p.chunks - 1) * p.chunk_len, cols);  // and no chunk is empty for a full row
  EXPECT_EQ(p.bitmap_words, p.chunks * p.chunk_len / 32);
  EXPECT_GE(p.candidate_cap, kTopKMinCandidates);
  EXPECT_LE(p.candidate_cap, kTopKMaxCandidates);
}

TEST(TopKPlan, FewLongRowsSplitIntoOneWave) {
  const TopKSplitPlan p = PlanTopKSplit(64, 131072, kH200Sms);
  ExpectCovers(p, 131072);
  EXPECT_EQ(p.chunks, 4);  // 64 rows x 4 chunks = 256 CTAs <= 2 per SM on 132 SMs
  EXPECT_LE(64 * p.chunks, kH200Sms * kTopKChunkCtasPerSm);
  EXPECT_EQ(p.candidate_cap, 32768);
}

void ExpectGroup(const TopKSplitPlan& p, int64_t rows, int64_t cols, int keys, int sms) {
  ASSERT_TRUE(p.group()) << rows << " x " << cols;
  EXPECT_FALSE(p.split());
  EXPECT_EQ(p.group_keys, keys) << rows << " x " << cols;
  EXPECT_EQ(p.chunk_len, int64_t{keys} * kTopKGroupThreads);
  EXPECT_GE(p.chunks * p.chunk_len, cols);
  EXPECT_LT((p.chunks - 1) * p.chunk_len, cols);
  EXPECT_LE(p.chunks, kTopKGroupMaxChunks);
  EXPECT_LE(rows * p.chunks, sms);  // one CTA per SM
}

// Few long rows take the row-group path with the most chunks whose CTAs fit
// one per SM.
TEST(TopKPlan, FewLongRowsTakeTheRowGroup) {
  ExpectGroup(PlanTopKSplit(1, 32768, kH200Sms), 1, 32768, 4, kH200Sms);
  ExpectGroup(PlanTopKSplit(1, 65536, kH200Sms), 1, 65536, 4, kH200Sms);
  ExpectGroup(PlanTopKSplit(1, 131072, kH200Sms), 1, 131072, 8, kH200Sms);
  ExpectGroup(PlanTopKSplit(1, 200000, kA100Sms), 1, 200000, 16, kA100Sms);
  ExpectGroup(PlanTopKSplit(8, 32768, kH200Sms), 8, 32768, 4, kH200Sms);
  ExpectGroup(PlanTopKSplit(8, 32768, kA100Sms), 8, 32768, 8, kA100Sms);  // 8 x 16 > 108 SMs
  ExpectGroup(PlanTopKSplit(8, 131072, kH200Sms), 8, 131072, 16, kH200Sms);
  ExpectGroup(PlanTopKSplit(32, 32768, kH200Sms), 32, 32768, 16, kH200Sms);
  // Between the short-row path's 12K and 16K: up to 8 keys per thread.
  ExpectGroup(PlanTopKSplit(1, kTopKGroupMinLen + 1, kH200Sms), 1, kTopKGroupMinLen + 1, 4, kH200Sms);
  ExpectGroup(PlanTopKSplit(1, kTopKShortMaxLen, kH200Sms), 1, kTopKShortMaxLen, 4, kH200Sms);
  ExpectGroup(PlanTopKSplit(16, kTopKShortMaxLen, kH200Sms), 16, kTopKShortMaxLen, 4, kH200Sms);
  ExpectGroup(PlanTopKSplit(16, kTopKShortMaxLen, kA100Sms), 16, kTopKShortMaxLen, 8, kA100Sms);
  EXPECT_FALSE(PlanTopKSplit(64, kTopKShortMaxLen, kH200Sms).group());  // would need 16 keys: the short-row path
  EXPECT_FALSE(PlanTopKSplit(64, kTopKShortMaxLen, kH200Sms).split());
  // The longest row: 32 chunks of 16 keys per thread.
  ExpectGroup(PlanTopKSplit(1, kTopKMaxLen, kH200Sms), 1, kTopKMaxLen, 16, kH200Sms);
}

TEST(TopKPlan, GroupPlansNeedAKnownKeyCountAndFewChunks) {
  for (int keys : kTopKGroupKeyOptions) EXPECT_TRUE(IsTopKGroupKeys(keys));
  EXPECT_FALSE(IsTopKGroupKeys(6));
  EXPECT_FALSE(TopKGroupPlan(1, 32768, 6).group());
  EXPECT_FALSE(TopKGroupPlan(1, 131072, 4).group());  // 64 chunks
  EXPECT_FALSE(TopKGroupPlan(0, 32768, 4).group());
  EXPECT_FALSE(TopKGroupPlan(70000, 32768, 16).group());  // grid.y
  EXPECT_FALSE(TopKGroupPlan(1, 0, 4).group());
  const TopKSplitPlan g = TopKGroupPlan(3, 40000, 8);
  ASSERT_TRUE(g.group());
  EXPECT_EQ(g.chunks, 10);
  EXPECT_EQ(g.chunk_len, 4096);
}

// The choices the H200 measurements made (graph replays, real-like rows)
// where the row group does not fit one CTA per SM: split 64 x 128K (56 vs
// 76), one CTA per row for 128 x 128K (105 vs 83).
TEST(TopKPlan, FollowsTheMeasuredCrossovers) {
  EXPECT_TRUE(PlanTopKSplit(64, 131072, kH200Sms).split());
  EXPECT_TRUE(PlanTopKSplit(16, 131072, kH200Sms).split());  // 16 x 16 chunks do not fit 132 SMs
  EXPECT_FALSE(PlanTopKSplit(64, 32768, kH200Sms).split());
  EXPECT_FALSE(PlanTopKSplit(64, 32768, kH200Sms).group());
  EXPECT_FALSE(PlanTopKSplit(128, 131072, kH200Sms).split());
  EXPECT_FALSE(PlanTopKSplit(256, 32768, kH200Sms).split());
  // The model itself: linear in the work each path serializes.
  EXPECT_NEAR(TopKOneCtaMicros(64, 131072, kH200Sms), 71.2, 0.1);
  EXPECT_NEAR(TopKOneCtaMicros(200, 131072, kH200Sms), 2 * 71.2, 0.1);  // two waves
  EXPECT_NEAR(TopKSplitMicros(64, 131072, kH200Sms), 26.0 + 4.0 * 8.388608, 0.01);
  EXPECT_GT(TopKSplitMicros(64, 131072, kA100Sms), TopKSplitMicros(64, 131072, kH200Sms));
}

TEST(TopKPlan, ManyRowsKeepOneCtaEach) {
  // Fewer than 2 chunks per row would fit in one wave of chunk CTAs.
  EXPECT_FALSE(PlanTopKSplit(kH200Sms * kTopKChunkCtasPerSm / 2 + 1, 131072, kH200Sms).split());
  EXPECT_FALSE(PlanTopKSplit(4096, 8192, kH200Sms).split());  // prefill
  EXPECT_EQ(TopKSplitWorkspaceLayout(PlanTopKSplit(4096, 8192, kH200Sms), 4096).total, 0u);
}

TEST(TopKPlan, ShortOrEmptyRowsKeepOneCta) {
  // Rows up to kTopKGroupMinLen take the short-row path, whatever their
  // number: a decode step just past 8K positions among them.
  EXPECT_FALSE(PlanTopKSplit(1, kTopKGroupMinLen, kH200Sms).split());
  EXPECT_FALSE(PlanTopKSplit(1, kTopKGroupMinLen, kH200Sms).group());
  EXPECT_FALSE(PlanTopKSplit(1, 8193, kH200Sms).group());
  EXPECT_FALSE(PlanTopKSplit(4096, kTopKShortMaxLen, kH200Sms).split());
  EXPECT_TRUE(PlanTopKSplit(1, kTopKShortMaxLen, kH200Sms, 4).split());  // unless forced
  EXPECT_FALSE(PlanTopKSplit(1, 0, kH200Sms).split());
  EXPECT_FALSE(PlanTopKSplit(0, 131072, kH200Sms).split());
  EXPECT_FALSE(PlanTopKSplit(70000, 131072, kH200Sms, 4).split());  // grid.y limit
}

TEST(TopKPlan, ForcedChunksAreHonoredAndClamped) {
  EXPECT_FALSE(PlanTopKSplit(1, 131072, kH200Sms, 1).split());
  const TopKSplitPlan p = PlanTopKSplit(500, 5000, kH200Sms, 3);  // many rows: forced anyway
  ExpectCovers(p, 5000);
  EXPECT_EQ(p.chunks, 3);
  EXPECT_EQ(p.chunk_len, 2048);  // ceil(5000 / 3) = 1667 -> 2048
  // 5000 / 5 = 1000 -> 1024-wide chunks: still 5 of them.
  EXPECT_EQ(PlanTopKSplit(1, 5000, kH200Sms, 5).chunks, 5);
  // 7 chunks of 2049 positions: 1024 each would need 3, so 3 it is.
  const TopKSplitPlan q = PlanTopKSplit(2, 2049, kH200Sms, 7);
  ExpectCovers(q, 2049);
  EXPECT_EQ(q.chunks, 3);
  EXPECT_FALSE(PlanTopKSplit(1, 1000, kH200Sms, 4).split());  // one 1024-wide chunk holds it
}

TEST(TopKPlan, LongestRowsStayWithinTheRowCtaBitmap) {
  for (int forced : {2, 3, 7, 100}) {
    const TopKSplitPlan p = PlanTopKSplit(1, kTopKMaxLen, kH200Sms, forced);
    ExpectCovers(p, kTopKMaxLen);
  }
  // num_cols above the limit is planned as the limit (the launcher rejects it first).
  EXPECT_EQ(PlanTopKSplit(1, 2 * kTopKMaxLen, kH200Sms).chunk_len, PlanTopKSplit(1, kTopKMaxLen, kH200Sms).chunk_len);
}

TEST(TopKPlan, WorkspaceLayoutIsAlignedAndSized) {
  const int64_t rows = 3;
  const TopKSplitPlan p = PlanTopKSplit(rows, 100000, kH200Sms, 5);
  ASSERT_TRUE(p.split());
  const TopKSplitLayout l = TopKSplitWorkspaceLayout(p, rows);
  EXPECT_EQ(l.row_hist, 0u);
  EXPECT_EQ(l.chunk_hist % 16, 0u);
  EXPECT_EQ(l.bitmap % 16, 0u);
  EXPECT_EQ(l.candidates % 16, 0u);
  EXPECT_GE(l.chunk_hist, rows * kTopKBins * 4u);
  EXPECT_GE(l.bitmap - l.chunk_hist, static_cast<size_t>(rows * p.chunks * kTopKBins * 4));
  EXPECT_GE(l.candidates - l.bitmap, static_cast<size_t>(rows * p.bitmap_words * 4));
  EXPECT_EQ(l.total - l.candidates, static_cast<size_t>(rows * p.candidate_cap * 8));
  EXPECT_EQ(TopKSplitWorkspaceLayout(TopKSplitPlan{}, rows).total, 0u);
  EXPECT_EQ(TopKSplitWorkspaceLayout(TopKGroupPlan(rows, 100000, 16), rows).total, 0u);  // not a split
}

TEST(TopKPlan, GroupWorkspaceLayoutIsAlignedAndSized) {
  const int64_t rows = 3;
  const TopKSplitPlan g = TopKGroupPlan(rows, 100000, 16);
  ASSERT_TRUE(g.group());
  const TopKGroupLayout l = TopKGroupWorkspaceLayout(g, rows);
  EXPECT_EQ(l.arrived, 0u);
  EXPECT_EQ(l.hists % 16, 0u);
  EXPECT_EQ(l.list % 16, 0u);
  EXPECT_GE(l.hists, rows * 4u);
  EXPECT_GE(l.list - l.hists, static_cast<size_t>(rows * kTopKGroupLevels * g.chunks * kTopKGroupBins * 4));
  EXPECT_EQ(l.total - l.list, static_cast<size_t>(rows * kTopKGroupListCap * 8));
  EXPECT_EQ(TopKGroupWorkspaceLayout(PlanTopKSplit(rows, 100000, kH200Sms, 5), rows).total, 0u);  // a split
}

}  // namespace
}  // namespace spar
