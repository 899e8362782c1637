// The W4A16 GEMM's planners and launch validation, which read no device
// memory and so run without a GPU: the tile each dense and grouped launch
// plans for its size (the measured best on GLM-5's shapes), the tail split's
// policy, and the refusals of bad parameters with messages naming them. The
// kernels themselves are checked against kernels/ref in w4a16_gemm_test.cc.
#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "kernels/cuda/gemm/moe.h"
#include "kernels/cuda/gemm/w4a16_gemm.h"

namespace spar::testing {
namespace {

// The plans (no device memory read, so this runs without a GPU): dense
// launches of up to 16 tokens (8-token tiles up to 8, 16-token tiles from
// 9) and grouped ones of up to 8 rows per expert take the streaming kernel,
// with the widths the sweep found best on GLM-5's shapes at 132 SMs
// (bench/RESULTS.md, 2026-12-04); prefill the tile kernels; a forced one is
// kept.
TEST(W4A16GemmTest, PlansTakeTheStreamingKernelUpToSixteenTokens) {
  auto dense = [](int64_t m, int64_t rows, int64_t k, W4WeightType type) {
    W4A16GemmParams p;
    p.m = m;
    p.k = k;
    p.w.type = type;
    p.w.n = rows;
    p.w.rows_padded = rows;
    p.w.group = 128;
    p.num_sms = 132;
    return p;
  };
  auto name = [](int config) { return std::string(W4ConfigName(config)); };
  for (W4WeightType type : {W4WeightType::kInt4, W4WeightType::kNvfp4}) {
    for (int64_t m = 1; m <= 16; ++m) {
      const int config = W4A16GemmPlannedConfig(dense(m, 12288, 6144, type));
      EXPECT_TRUE(W4ConfigIsStream(config)) << m;
      EXPECT_EQ(W4ConfigBlockTokens(config), m <= 8 ? 8 : 16) << m;  // one or two 8-token B fragments
    }
    EXPECT_EQ(name(W4A16GemmPlannedConfig(dense(1, 12288, 6144, type))), "W4SM2D3W4");  // dense gate, TP 1
    EXPECT_EQ(name(W4A16GemmPlannedConfig(dense(1, 6144, 2048, type))), "W4SM1D4W4");   // expert down, o_proj TP 8
    EXPECT_EQ(name(W4A16GemmPlannedConfig(dense(8, 4096, 6144, type))), "W4SM1D4W8");   // expert gate/up
    EXPECT_EQ(name(W4A16GemmPlannedConfig(dense(1, 2048, 2048, type))), "W4SM1D4W8");   // q_b, TP 8
    EXPECT_EQ(name(W4A16GemmPlannedConfig(dense(16, 12288, 6144, type))), "W4SM2N2D2W4");
    EXPECT_EQ(name(W4A16GemmPlannedConfig(dense(9, 2048, 2048, type))), "W4SM1N2D3W8");
    EXPECT_FALSE(W4ConfigIsStream(W4A16GemmPlannedConfig(dense(17, 4096, 2048, type))));
    EXPECT_FALSE(W4ConfigIsStream(W4A16GemmPlannedConfig(dense(2048, 4096, 6144, type))));
    // From 65 tokens the 64-token tile of 128 rows (1.19-1.33x W4P128T at
    // 128 and 256 tokens, 1.01-1.5x up to 4096 tokens, 2026-12-07); 33-64 W4T64
    // (it lost on the shared expert there).
    EXPECT_EQ(name(W4A16GemmPlannedConfig(dense(64, 12288, 6144, type))), "W4T64");
    EXPECT_EQ(name(W4A16GemmPlannedConfig(dense(65, 12288, 6144, type))), "W4T64R4");
    EXPECT_EQ(name(W4A16GemmPlannedConfig(dense(256, 4096, 6144, type))), "W4T64R4");
    EXPECT_EQ(name(W4A16GemmPlannedConfig(dense(257, 4096, 6144, type))), "W4T64R4");
    EXPECT_EQ(name(W4A16GemmPlannedConfig(dense(4096, 12288, 6144, type))), "W4T64R4");
    EXPECT_EQ(name(W4A16GemmPlannedConfig(dense(128, 4160, 6144, type))), "W4T64");  // rows not a multiple of 128
    W4A16GemmParams forced = dense(1, 6144, 2048, type);
    forced.force_config = 0;
    EXPECT_EQ(W4A16GemmPlannedConfig(forced), 0);
    EXPECT_EQ(W4A16GemmPlannedConfig(dense(0, 6144, 2048, type)), -1);

    auto grouped = [&](int64_t tokens, int64_t rows_per_expert_hint) {
      W4MoeGroupedGemmParams g;
      g.num_experts = 256;
      g.max_rows = tokens * 8;
      g.max_rows_per_expert = rows_per_expert_hint;
      g.expected_rows_per_expert = std::max<int64_t>(1, tokens * 8 / 256);
      g.k = 6144;
      g.weight.type = type;
      g.weight.n = 2048;
      g.weight.rows_padded = 4096;
      g.weight.silu_pair = true;
      g.weight.group = 128;
      return g;
    };
    EXPECT_EQ(name(W4MoeGroupedGemmPlannedConfig(grouped(1, 1))), "W4SM2D3W4");
    EXPECT_EQ(name(W4MoeGroupedGemmPlannedConfig(grouped(8, 8))), "W4SM2D3W2");
    EXPECT_EQ(name(W4MoeGroupedGemmPlannedConfig(grouped(64, 64))), "W4SM2D3W2");  // ~2 rows an expert
    EXPECT_FALSE(W4ConfigIsStream(W4MoeGroupedGemmPlannedConfig(grouped(4096, 4096))));
    // 33-64 rows an expert (a 2048-token chunk) on the 64-token tile of 128
    // rows; 17-32 W4T32, 128 the prefill tile (with its tail split).
    EXPECT_EQ(name(W4MoeGroupedGemmPlannedConfig(grouped(1024, 1024))), "W4T32");    // 32 rows an expert
    EXPECT_EQ(name(W4MoeGroupedGemmPlannedConfig(grouped(2048, 2048))), "W4T64R4");  // 64
    EXPECT_EQ(name(W4MoeGroupedGemmPlannedConfig(grouped(4096, 4096))), "W4P128T");  // 128
    W4MoeGroupedGemmParams odd_rows = grouped(2048, 2048);
    odd_rows.weight.rows_padded = 4160;  // not a multiple of 128: the 128-row tile cannot take it
    EXPECT_EQ(name(W4MoeGroupedGemmPlannedConfig(odd_rows)), "W4T64");
  }
}

// The automatic split: on the planned prefill tile only.
TEST(W4MoeGroupedGemmTest, TailSplitOnThePrefillTile) {
  W4MoeGroupedGemmParams p;
  p.num_experts = 256;
  p.k = 6144;
  p.max_rows = 4096 * 8;
  p.expected_rows_per_expert = 128;
  p.weight.rows_padded = 4096;
  p.workspace_bytes = MoeGroupedGemmWorkspaceBytes(p.max_rows, p.num_experts);
  ASSERT_STREQ(W4ConfigName(W4MoeGroupedGemmPlannedConfig(p)), "W4P128T");
  EXPECT_EQ(W4MoeGroupedGemmTailPlan(p).below, 32);
  EXPECT_EQ(W4MoeGroupedGemmBlockTokens(p), 0);
  p.tail_rows = 0;
  EXPECT_EQ(W4MoeGroupedGemmTailPlan(p).below, 0);
  EXPECT_EQ(W4MoeGroupedGemmBlockTokens(p), 128);
  p.tail_rows = -1;
  p.expected_rows_per_expert = 16;  // a decode tile
  EXPECT_EQ(W4MoeGroupedGemmTailPlan(p).below, 0);
  p.expected_rows_per_expert = 64;  // the 64-token tile: its remainders cost half a prefill tile
  ASSERT_STREQ(W4ConfigName(W4MoeGroupedGemmPlannedConfig(p)), "W4T64R4");
  EXPECT_EQ(W4MoeGroupedGemmTailPlan(p).below, 0);
  EXPECT_EQ(W4MoeGroupedGemmBlockTokens(p), 64);
  p.expected_rows_per_expert = 128;
  p.workspace_bytes = 16;  // the two lists do not fit
  EXPECT_EQ(W4MoeGroupedGemmTailPlan(p).below, 0);
}

// A grouped launch over host memory: validation reads no device memory, so
// the refusals below run without a GPU.
W4MoeGroupedGemmParams HostOnlyGroupedParams() {
  alignas(256) static uint8_t host[4096];
  W4MoeGroupedGemmParams p;
  p.num_experts = 4;
  p.expert_offsets = reinterpret_cast<const int32_t*>(host);
  p.max_rows = 8;
  p.k = 128;
  p.x = reinterpret_cast<const __nv_bfloat16*>(host);
  p.ldx = 128;
  p.weight.type = W4WeightType::kInt4;
  p.weight.values = host;
  p.weight.scales = reinterpret_cast<const float*>(host);
  p.weight.zeros = host;
  p.weight.n = 64;
  p.weight.rows_padded = 64;
  p.weight.group = 64;
  p.values_stride = 64 * 128 / 2;
  p.scales_stride = 64 * 2;
  p.zeros_stride = 64 * 2;
  p.y = host;
  p.ldy = 64;
  p.workspace = host;
  p.workspace_bytes = sizeof(host);
  return p;
}

// A negative row hint is refused with a message naming it.
TEST(W4MoeGroupedGemmTest, RejectsANegativeRowHint) {
  W4MoeGroupedGemmParams p = HostOnlyGroupedParams();
  p.max_rows_per_expert = -1;
  const absl::Status st = LaunchW4MoeGroupedGemm(p, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("max_rows_per_expert"), absl::string_view::npos) << st;
}

// The tail split's parameters are refused with a message naming them.
TEST(W4MoeGroupedGemmTest, RejectsBadTailParameters) {
  W4MoeGroupedGemmParams p = HostOnlyGroupedParams();
  p.tail_rows = -2;
  absl::Status st = LaunchW4MoeGroupedGemm(p, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("tail_rows"), absl::string_view::npos) << st;
  p.tail_rows = -1;
  p.force_tail_config = kW4NumConfigs;
  st = LaunchW4MoeGroupedGemm(p, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("force_tail_config"), absl::string_view::npos) << st;
}

// A permutation work list of the launch's tile height that is not 16-byte
// aligned is refused with a message naming it (before anything launches).
TEST(W4MoeGroupedGemmTest, RejectsAMisalignedWorkList) {
  W4MoeGroupedGemmParams p = HostOnlyGroupedParams();
  p.work_block_tokens = W4MoeGroupedGemmBlockTokens(p);
  ASSERT_GT(p.work_block_tokens, 0);
  p.work = static_cast<const uint8_t*>(p.workspace) + 4;
  const absl::Status st = LaunchW4MoeGroupedGemm(p, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("W4MoeGroupedGemm: work must be 16-byte aligned"), absl::string_view::npos) << st;
}

}  // namespace
}  // namespace spar::testing
