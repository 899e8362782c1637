// The sparse MLA planner (host only): enough CTAs for small batches, no
// split for large ones, every split at most 2048 entries, cuts that cover
// the list; when a prefill step widens FP8 rows first.
#include <cstdint>

#include "gtest/gtest.h"
#include "kernels/cuda/attention/latent_widen.h"
#include "kernels/cuda/attention/sparse_mla.h"

namespace spar {
namespace {

constexpr int kH200Sms = 132, kH200Smem = 233472;
constexpr int kA100Sms = 108, kA100Smem = 167936;

TEST(SparseMlaPlan, SmallBatchesSplitToFillTheGpu) {
  const SparseMlaPlan p = PlanSparseMla(1, 64, 2048, kH200Sms, kH200Smem, false);
  EXPECT_EQ(p.head_tile, 16);  // 64-head tiles could not make enough CTAs
  EXPECT_GE(static_cast<int64_t>(p.num_splits) * (64 / p.head_tile), kH200Sms / 2);
  EXPECT_GE(p.num_splits * p.keys_per_split, 2048);
}

TEST(SparseMlaPlan, LargeBatchesDoNotSplit) {
  const SparseMlaPlan p = PlanSparseMla(4096, 128, 2048, kA100Sms, kA100Smem, false);
  EXPECT_EQ(p.head_tile, 64);
  EXPECT_EQ(p.num_splits, 1);
  EXPECT_EQ(p.keys_per_split, 2048);
}

TEST(SparseMlaPlan, CoversTheListWithinLimits) {
  for (int64_t tokens : {1, 2, 16, 64, 128, 4096}) {
    for (int heads : {8, 16, 32, 64, 128}) {
      for (int len : {0, 1, 31, 32, 300, 2048, 5000}) {
        for (bool fp8 : {false, true}) {
          const SparseMlaPlan p = PlanSparseMla(tokens, heads, len, kH200Sms, kH200Smem, fp8);
          SCOPED_TRACE(::testing::Message() << tokens << " x " << heads << " heads, len " << len);
          EXPECT_TRUE(p.head_tile == 16 || p.head_tile == 32 || p.head_tile == 64 || (fp8 && p.head_tile == 8));
          EXPECT_GE(p.num_splits, 1);
          EXPECT_EQ(p.keys_per_split % 32, 0);
          EXPECT_GE(p.keys_per_split, 32);
          EXPECT_LE(p.keys_per_split, 2048);
          EXPECT_GE(static_cast<int64_t>(p.num_splits) * p.keys_per_split, len);
          EXPECT_LT(static_cast<int64_t>(p.num_splits - 1) * p.keys_per_split, std::max(len, 1));  // no empty split
          EXPECT_EQ(SparseMlaWorkspaceBytes(p, tokens, heads) > 0, p.num_splits > 1);
        }
      }
    }
  }
}

// bf16 16-head tiles fit twice per SM on an H100/H200 only; the narrow FP8
// tiles (8 and 16 heads), with no widened bf16 copy of the rows, on an A100
// too (registers allow no third one on either).
TEST(SparseMlaPlan, CtasPerSmOfEachTile) {
  EXPECT_EQ(SparseMlaCtasPerSm(16, false, kH200Smem), 2);
  EXPECT_EQ(SparseMlaCtasPerSm(16, true, kH200Smem), 2);
  EXPECT_EQ(SparseMlaCtasPerSm(8, true, kH200Smem), 2);
  EXPECT_EQ(SparseMlaCtasPerSm(16, false, kA100Smem), 1);
  EXPECT_EQ(SparseMlaCtasPerSm(16, true, kA100Smem), 2);
  EXPECT_EQ(SparseMlaCtasPerSm(8, true, kA100Smem), 2);
  EXPECT_EQ(SparseMlaCtasPerSm(64, false, kA100Smem), 1);
  EXPECT_EQ(SparseMlaCtasPerSm(64, true, kA100Smem), 1);
}

// FP8 rows get the 8-head tile when the heads fit it (GLM-5 at tensor
// parallelism 8); bf16 rows keep 16-head tiles.
TEST(SparseMlaPlan, FewFp8HeadsGetTheNarrowTile) {
  EXPECT_EQ(PlanSparseMla(64, 8, 2048, kH200Sms, kH200Smem, true).head_tile, 8);
  EXPECT_EQ(PlanSparseMla(64, 5, 2048, kA100Sms, kA100Smem, true).head_tile, 8);
  EXPECT_EQ(PlanSparseMla(64, 16, 2048, kH200Sms, kH200Smem, true).head_tile, 16);
  EXPECT_EQ(PlanSparseMla(64, 8, 2048, kH200Sms, kH200Smem, false).head_tile, 16);
}

// FP8 decode batches at 32-128 heads (tensor parallelism 1 / 2) run the
// narrow kernel's 16-head tiles up to 128 tokens; larger FP8 launches and
// bf16 rows keep the wide tiles.
TEST(SparseMlaPlan, Fp8DecodeBatchesAtManyHeadsGetSixteenHeadTiles) {
  for (int heads : {32, 64, 128}) {
    for (int64_t tokens : {1, 64, 128}) {
      EXPECT_EQ(PlanSparseMla(tokens, heads, 2048, kH200Sms, kH200Smem, true).head_tile, 16) << heads << " " << tokens;
      EXPECT_EQ(PlanSparseMla(tokens, heads, 2048, kA100Sms, kA100Smem, true).head_tile, 16) << heads << " " << tokens;
    }
    EXPECT_EQ(PlanSparseMla(129, heads, 2048, kH200Sms, kH200Smem, true).head_tile, heads == 32 ? 32 : 64) << heads;
    EXPECT_EQ(PlanSparseMla(64, heads, 2048, kH200Sms, kH200Smem, false).head_tile, heads == 32 ? 32 : 64) << heads;
  }
}

// The planner's split is PlanSparseMlaSplits' for the tile it chose, so a
// bench timing another tile through PlanSparseMlaSplits cuts it alike.
TEST(SparseMlaPlan, SplitsOfTheChosenTileAreThePlannersSplits) {
  for (bool fp8 : {false, true}) {
    for (int heads : {8, 16, 32, 64, 128}) {
      for (int64_t tokens : {1, 4, 64, 200, 4096}) {
        for (int len : {0, 64, 2048, 100000}) {
          const SparseMlaPlan p = PlanSparseMla(tokens, heads, len, kA100Sms, kA100Smem, fp8);
          const SparseMlaPlan q = PlanSparseMlaSplits(tokens, heads, p.head_tile, len, kA100Sms, kA100Smem, fp8);
          EXPECT_EQ(p.num_splits, q.num_splits) << fp8 << " " << heads << " " << tokens << " " << len;
          EXPECT_EQ(p.keys_per_split, q.keys_per_split) << fp8 << " " << heads << " " << tokens << " " << len;
        }
      }
    }
  }
}

// A forced 8-head tile exists for FP8 rows only; the refusal names the field
// (checked before any CUDA call, so it runs without a GPU).
TEST(SparseMlaPlan, EightHeadTileNeedsFp8Rows) {
  SparseMlaParams p;
  p.tokens = 1;
  p.heads = 8;
  p.q = reinterpret_cast<const __nv_bfloat16*>(uintptr_t{256});
  p.q_token_stride = 8 * 576;
  p.q_head_stride = 576;
  p.cache = reinterpret_cast<const uint8_t*>(uintptr_t{4096});
  p.num_slots = 64;
  p.indices = reinterpret_cast<const int32_t*>(uintptr_t{8192});
  p.indices_stride = 64;
  p.list_len = 64;
  p.scale = 0.0625f;
  p.out = reinterpret_cast<__nv_bfloat16*>(uintptr_t{16384});
  p.out_token_stride = 8 * 512;
  p.out_head_stride = 512;
  p.plan = SparseMlaPlan{8, 1, 64};
  p.format = LatentFormat::kBF16;
  const absl::Status st = LaunchSparseMla(p, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("plan.head_tile"), absl::string_view::npos) << st;
}

// A 4096-token chunk at 64 heads over an 8K or 128K context widens; decode
// batches (each row read by one token), narrow head counts (the FP8 tiles
// beat bf16 rows there), bf16 rows and scratches past the cap do not.
TEST(LatentWidenPolicy, WidensOnlyWhereRowsAreReused) {
  EXPECT_TRUE(ShouldWidenLatentRows(true, 4096, 64, 2048, 8192 / 64));
  EXPECT_TRUE(ShouldWidenLatentRows(true, 4096, 64, 2048, 131072 / 64));
  EXPECT_TRUE(ShouldWidenLatentRows(true, 4096, 32, 2048, 8192 / 64));
  EXPECT_FALSE(ShouldWidenLatentRows(false, 4096, 64, 2048, 8192 / 64));
  EXPECT_FALSE(ShouldWidenLatentRows(true, 4096, 16, 2048, 8192 / 64));
  EXPECT_FALSE(ShouldWidenLatentRows(true, 64, 64, 2048, 64 * 8192 / 64));  // decode, 64 sequences
  EXPECT_FALSE(ShouldWidenLatentRows(true, 1, 64, 2048, 32));               // one token, 2K context
  EXPECT_FALSE(ShouldWidenLatentRows(true, 4096, 64, 2048, 0));
  // The cap: 512 MiB of bf16 rows is 466,033 rows (7281 blocks).
  EXPECT_EQ(WidenedLatentBytes(1), size_t{64} * 1152);
  EXPECT_TRUE(ShouldWidenLatentRows(true, 16384, 64, 2048, 7281));
  EXPECT_FALSE(ShouldWidenLatentRows(true, 16384, 64, 2048, 7282));
  // Reuse: 4 index entries per widened row.
  EXPECT_TRUE(ShouldWidenLatentRows(true, 512, 64, 2048, 4096));
  EXPECT_FALSE(ShouldWidenLatentRows(true, 511, 64, 2048, 4096));
}

}  // namespace
}  // namespace spar
