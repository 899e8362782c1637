// The split merge inside the un-absorption (LaunchMlaMergeUnabsorb) against
// the two launches it replaces: LaunchSparseMla's merge kernel, then
// LaunchMlaOutUnabsorb. The same sparse MLA partials go through both paths
// and the outputs must be equal bit for bit (the engine uses the fused path
// at decode sizes only, and a speculative verify step's rows must equal a
// plain decode step's). Fresh random caches, queries and lists with -1
// entries and one token whose list is all -1 (an empty row).
#include <cuda_bf16.h>

#include <cstring>
#include <vector>

#include "base/cache_layout.h"
#include "base/numeric.h"
#include "base/rng.h"
#include "gtest/gtest.h"
#include "kernels/cuda/attention/absorb_gemm.h"
#include "kernels/cuda/attention/sparse_mla.h"
#include "kernels/ref/cache_ref.h"
#include "tests/kernels/gpu_test_util.h"

namespace spar {
namespace {

using testing::DeviceArray;

struct Case {
  LatentFormat format;
  int heads, nope, v;  // nope/v: GLM-5 192/256, DeepSeek-V3.2 128/128
  int64_t tokens;
  int head_tile, splits;
};

// bf16 (or FP8) latent rows, a query tile, index lists, kv_b.
struct Inputs {
  DeviceArray<uint8_t> cache;
  DeviceArray<uint16_t> q, kv_b;
  DeviceArray<int32_t> idx;
  int64_t num_slots = 0;
  int list_len = 0;
};

void MakeInputs(const Case& c, uint64_t seed, Inputs& in) {
  in.num_slots = 3000;
  in.list_len = c.splits * 64;  // two 32-key blocks per split
  const size_t rb = LatentRowBytes(c.format);
  std::vector<uint8_t> bytes(rb * in.num_slots);
  Rng rng(seed);
  std::vector<float> row(kLatentDim);
  for (int64_t s = 0; s < in.num_slots; ++s) {
    for (int i = 0; i < kLatentDim; ++i) row[i] = (0.5f + 0.25f * static_cast<float>(i / 128)) * rng.Symmetric();
    ref::EncodeLatentRow(c.format, row.data(), bytes.data() + rb * s);
  }
  in.cache.Upload(bytes);
  std::vector<float> q = testing::RandomFloats(c.tokens * c.heads * kLatentDim, seed + 1, -1.5f, 1.5f);
  in.q.Upload(testing::ToBf16(q));
  std::vector<float> kvb =
      testing::RandomFloats(static_cast<size_t>(c.heads) * (c.nope + c.v) * 512, seed + 2, -0.1f, 0.1f);
  in.kv_b.Upload(testing::ToBf16(kvb));
  std::vector<int32_t> idx(c.tokens * in.list_len);
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int j = 0; j < in.list_len; ++j) {
      // Every 7th entry skipped; the last token of a multi-token case is
      // empty (all -1): its row is 0 on both paths.
      const bool empty_row = c.tokens > 1 && t == c.tokens - 1;
      idx[t * in.list_len + j] =
          empty_row || j % 7 == 3 ? -1 : static_cast<int32_t>(rng.Uniform() * static_cast<float>(in.num_slots - 1));
    }
  }
  in.idx.Upload(idx);
}

SparseMlaParams AttentionParams(const Case& c, Inputs& in, void* ws, size_t ws_bytes) {
  SparseMlaParams p;
  p.q = reinterpret_cast<const __nv_bfloat16*>(in.q.get());
  p.tokens = c.tokens;
  p.heads = c.heads;
  p.q_token_stride = static_cast<int64_t>(c.heads) * kLatentDim;
  p.q_head_stride = kLatentDim;
  p.format = c.format;
  p.cache = in.cache.get();
  p.num_slots = in.num_slots;
  p.indices = in.idx.get();
  p.indices_stride = in.list_len;
  p.list_len = in.list_len;
  p.scale = 0.0625f;
  p.plan.head_tile = c.head_tile;
  p.plan.num_splits = c.splits;
  p.plan.keys_per_split = 64;
  p.workspace = ws;
  p.workspace_bytes = ws_bytes;
  return p;
}

// The merged launch's output against merge-then-GEMM's: the same bits, no
// poison left, only the empty token's rows 0.
void ExpectEqualBits(const Case& c, const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  const int64_t out_n = c.tokens * c.heads * c.v;
  int64_t differ = 0, nonzero = 0, finite = 0;
  for (int64_t i = 0; i < out_n; ++i) {
    differ += a[i] != b[i];
    const float x = Bf16ToFloat(b[i]);
    nonzero += x != 0.0f;
    finite += std::isfinite(x);
  }
  EXPECT_EQ(differ, 0) << "of " << out_n << " outputs";
  EXPECT_EQ(finite, out_n) << "poison left in the output";
  // Only the empty token's rows are 0.
  const int64_t empty = c.tokens > 1 ? static_cast<int64_t>(c.heads) * c.v : 0;
  EXPECT_GT(nonzero, (out_n - empty) * 9 / 10);
  if (c.tokens > 1) {
    for (int64_t i = out_n - empty; i < out_n; ++i) ASSERT_EQ(Bf16ToFloat(b[i]), 0.0f) << "empty row, output " << i;
  }
}

class MergeUnabsorb : public ::testing::TestWithParam<Case> {};

TEST_P(MergeUnabsorb, EqualsMergeThenUnabsorbBitForBit) {
  SPAR_REQUIRE_GPU();
  const Case c = GetParam();
  ASSERT_TRUE(MlaMergeUnabsorbFits(c.tokens, c.splits));
  Inputs in;
  MakeInputs(c, 1000 + c.tokens * 31 + c.splits, in);
  MlaAbsorbWeights w{reinterpret_cast<const __nv_bfloat16*>(in.kv_b.get()), c.heads, c.nope, c.v};
  SparseMlaPlan plan{c.head_tile, c.splits, 64};
  const size_t ws_bytes = SparseMlaWorkspaceBytes(plan, c.tokens, c.heads);
  DeviceArray<uint8_t> ws(ws_bytes);
  const int64_t out_n = c.tokens * c.heads * c.v;

  // Two launches: the merge kernel writes o_lat, the un-absorption reads it.
  DeviceArray<uint16_t> o_lat(c.tokens * c.heads * kLatentNopeDim), want(out_n), got(out_n);
  o_lat.Poison();
  want.Poison();
  got.Poison();
  ws.Poison();
  SparseMlaParams two = AttentionParams(c, in, ws.get(), ws_bytes);
  two.out = reinterpret_cast<__nv_bfloat16*>(o_lat.get());
  two.out_token_stride = static_cast<int64_t>(c.heads) * kLatentNopeDim;
  two.out_head_stride = kLatentNopeDim;
  absl::Status st = LaunchSparseMla(two, nullptr);
  ASSERT_TRUE(st.ok()) << st;
  st = LaunchMlaOutUnabsorb(w, reinterpret_cast<const __nv_bfloat16*>(o_lat.get()), c.tokens,
                            static_cast<int64_t>(c.heads) * kLatentNopeDim, kLatentNopeDim,
                            reinterpret_cast<__nv_bfloat16*>(want.get()), nullptr);
  ASSERT_TRUE(st.ok()) << st;
  SPAR_ASSERT_CUDA(cudaDeviceSynchronize());

  // One launch fewer: the partials stay in the workspace.
  ws.Poison();
  SparseMlaParams one = AttentionParams(c, in, ws.get(), ws_bytes);
  one.defer_merge = true;
  st = LaunchSparseMla(one, nullptr);
  ASSERT_TRUE(st.ok()) << st;
  const SparseMlaPartialsView view = SparseMlaPartials(plan, c.tokens, c.heads, ws.get());
  MlaSplitPartials parts{view.o, view.lse, c.splits};
  got.Poison();
  st = LaunchMlaMergeUnabsorb(w, parts, c.tokens, reinterpret_cast<__nv_bfloat16*>(got.get()), nullptr);
  ASSERT_TRUE(st.ok()) << st;
  SPAR_ASSERT_CUDA(cudaGetLastError());
  SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
  ExpectEqualBits(c, want.Download(), got.Download());
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MergeUnabsorb,
    ::testing::Values(
        // GLM-5 at TP 1 (64 heads, 16-head tiles) and TP 8 (8 heads: the FP8 narrow tile), batch 1 with the
        // engine's 32 splits; a 3-token verify step; 16 tokens x 4 splits (the most rows one CTA merges).
        Case{LatentFormat::kBF16, 64, 192, 256, 1, 16, 32}, Case{LatentFormat::kFp8Ds, 64, 192, 256, 1, 16, 32},
        Case{LatentFormat::kFp8Ds, 8, 192, 256, 1, 8, 64}, Case{LatentFormat::kBF16, 64, 192, 256, 3, 16, 21},
        Case{LatentFormat::kBF16, 16, 192, 256, 16, 16, 4}, Case{LatentFormat::kBF16, 32, 192, 256, 2, 32, 2},
        // DeepSeek-V3.2 head shapes, a 64-head tile.
        Case{LatentFormat::kBF16, 128, 128, 128, 1, 64, 16}, Case{LatentFormat::kFp8Ds, 16, 128, 128, 4, 16, 16},
        // 32 rows x splits with an empty token, five tokens of six splits, 16 tokens of two, eight splits of
        // FP8 rows.
        Case{LatentFormat::kBF16, 64, 192, 256, 2, 16, 16}, Case{LatentFormat::kBF16, 16, 192, 256, 5, 16, 6},
        Case{LatentFormat::kBF16, 16, 128, 128, 16, 16, 2}, Case{LatentFormat::kFp8Ds, 64, 192, 256, 1, 16, 8}));

TEST(MergeUnabsorbLimits, RefusesWhatOneCtaCannotMerge) {
  EXPECT_TRUE(MlaMergeUnabsorbFits(1, 64));
  EXPECT_TRUE(MlaMergeUnabsorbFits(16, 4));
  EXPECT_FALSE(MlaMergeUnabsorbFits(1, 65));
  EXPECT_FALSE(MlaMergeUnabsorbFits(17, 1));
  EXPECT_FALSE(MlaMergeUnabsorbFits(0, 2));
  EXPECT_FALSE(MlaMergeUnabsorbFits(3, 22));
  MlaAbsorbWeights w{reinterpret_cast<const __nv_bfloat16*>(16), 8, 192, 256};
  MlaSplitPartials parts{reinterpret_cast<const float*>(16), reinterpret_cast<const float*>(16), 65};
  const absl::Status st = LaunchMlaMergeUnabsorb(w, parts, 1, reinterpret_cast<__nv_bfloat16*>(16), nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("tokens x splits"), std::string::npos) << st;
}

TEST(MergeUnabsorbLimits, DeferredMergeNeedsASplitPlanAndNoLse) {
  SPAR_REQUIRE_GPU();
  const Case c{LatentFormat::kBF16, 16, 192, 256, 1, 16, 2};
  Inputs in;
  MakeInputs(c, 7, in);
  DeviceArray<uint8_t> ws(1 << 20);
  SparseMlaParams p = AttentionParams(c, in, ws.get(), ws.size());
  p.defer_merge = true;
  p.plan.num_splits = 1;
  p.plan.keys_per_split = in.list_len;
  absl::Status st = LaunchSparseMla(p, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("defer_merge"), std::string::npos) << st;
  p = AttentionParams(c, in, ws.get(), ws.size());
  p.defer_merge = true;
  DeviceArray<float> lse(16);
  p.lse = lse.get();
  st = LaunchSparseMla(p, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("lse"), std::string::npos) << st;
}

}  // namespace
}  // namespace spar
