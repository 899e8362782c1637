// The W8A16 GEMM tile heuristic (host only, runs in CI without a GPU).
#include "kernels/cuda/gemm/gemm_config.h"

#include <cmath>
#include <limits>
#include <sstream>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/gemm/grouped_block_order.h"

namespace spar::gemm {
namespace {

constexpr int kH200Sms = 132;
constexpr int kA100Sms = 108;
constexpr size_t kWorkspace = size_t{64} << 20;

GemmProblem Dense(int64_t m, int64_t n, int64_t k, int sms = kH200Sms, size_t ws = kWorkspace) {
  GemmProblem p;
  p.m = m;
  p.k = k;
  p.segments[0] = {n, 1};
  p.num_segments = 1;
  p.num_sms = sms;
  p.workspace_bytes = ws;
  return p;
}

TEST(GemmConfig, TableIsConsistent) {
  for (int i = 0; i < kNumTileConfigs; ++i) {
    const TileConfig& c = GetTileConfig(static_cast<TileConfigId>(i));
    EXPECT_EQ(static_cast<int>(c.id), i);
    // A100 allows at most 163 KB of dynamic shared memory per block.
    EXPECT_LE(c.smem_bytes(), 163 * 1024) << c.name;
    EXPECT_LE(c.epilogue_bytes(), c.stages * c.stage_bytes()) << c.name;
    EXPECT_EQ(c.block_rows % (16 * c.warps_rows), 0) << c.name;
    EXPECT_EQ(c.block_tokens % (8 * c.warps_tokens), 0) << c.name;
    EXPECT_EQ(128 % c.block_rows, 0) << c.name << ": a tile must sit in one 128-row scale block";
    EXPECT_GE(c.stages, 2) << c.name;
  }
}

TEST(GemmConfig, KStagesAndTiles) {
  EXPECT_EQ(KStages(6144, 1), 96);
  EXPECT_EQ(KStages(6144, 2), 192);
  EXPECT_EQ(KStages(128, 1), 2);
  GemmProblem p = Dense(1, 576, 6144);
  EXPECT_EQ(RowTiles(p, GetTileConfig(TileConfigId::kT8)), 9);     // 576 / 64
  EXPECT_EQ(RowTiles(p, GetTileConfig(TileConfigId::kT128)), 5);   // ceil(576 / 128)
  p.silu_mul = true;
  EXPECT_EQ(RowTiles(p, GetTileConfig(TileConfigId::kT8)), 18);    // 32 outputs per tile
  // Fused A projection: tiles never straddle segments.
  GemmProblem a = Dense(1, 2048, 6144);
  a.num_segments = 4;
  a.segments[1] = {576, 1};
  a.segments[2] = {128, 1};
  a.segments[3] = {32, 2};
  EXPECT_EQ(RowTiles(a, GetTileConfig(TileConfigId::kT8)), 32 + 9 + 2 + 1);
}

TEST(GemmConfig, DecodePicksSmallTokenTiles) {
  for (int64_t n : {12288, 6144, 16384, 28672, 4096}) {
    EXPECT_EQ(GetTileConfig(ChooseGemmPlan(Dense(1, n, 6144)).config).block_tokens, 8) << n;
    EXPECT_EQ(GetTileConfig(ChooseGemmPlan(Dense(8, n, 6144)).config).block_tokens, 8) << n;
    EXPECT_LE(GetTileConfig(ChooseGemmPlan(Dense(16, n, 6144)).config).block_tokens, 16) << n;
    EXPECT_LE(GetTileConfig(ChooseGemmPlan(Dense(64, n, 6144)).config).block_tokens, 64) << n;
  }
  // 16 warps per SM where the weights are large (the M <= 16 GEMMs wait on
  // latency, not on DRAM).
  EXPECT_EQ(ChooseGemmPlan(Dense(1, 12288, 6144)).config, TileConfigId::kT8R128M2F);
  EXPECT_EQ(ChooseGemmPlan(Dense(16, 12288, 6144)).config, TileConfigId::kT16W4F);
}

TEST(GemmConfig, PrefillPicksA128TokenTileWithoutSplit) {
  for (int64_t n : {12288, 6144, 16384, 28672}) {
    const GemmPlan plan = ChooseGemmPlan(Dense(2048, n, 6144));
    EXPECT_EQ(GetTileConfig(plan.config).block_tokens, 128) << n;
    EXPECT_EQ(plan.splits, 1) << n;
  }
}

TEST(GemmConfig, OnlyConfigsWhoseStagesDivideK) {
  for (int64_t k : {64, 128, 192, 384, 640}) {
    for (int64_t m : {1, 16, 64, 2048}) {
      const GemmProblem p = Dense(m, 4096, k);
      const GemmPlan plan = ChooseGemmPlan(p);
      EXPECT_TRUE(ConfigSupports(p, GetTileConfig(plan.config))) << "k=" << k << " " << plan;
    }
  }
  GemmProblem p = Dense(1, 256, 128);
  EXPECT_FALSE(ConfigSupports(p, GetTileConfig(TileConfigId::kT8W4)));   // 128 B rows, 256 B stages
  EXPECT_TRUE(ConfigSupports(p, GetTileConfig(TileConfigId::kT64W2)));   // 128 B stages
  p.segments[0].weight_bytes = 2;                                          // bf16: 256 B rows
  EXPECT_TRUE(ConfigSupports(p, GetTileConfig(TileConfigId::kT8W4)));
}

TEST(GemmConfig, SplitWorkspaceKeepsCountersAtOffsetZero) {
  const TileConfig& c = GetTileConfig(TileConfigId::kT8);
  EXPECT_EQ(SplitWorkspaceBytes(c, 100, 1), 0u);
  EXPECT_EQ(SplitWorkspaceBytes(c, 100, 3), kSplitCounterBytes + size_t{3} * 100 * 8 * 64 * 4);
  EXPECT_EQ(SplitWorkspaceBytes(c, kMaxSplitTiles + 1, 2), std::numeric_limits<size_t>::max());
}

TEST(GemmConfig, DecodeSpreadsWeightsOverEverySm) {
  // Memory-bound shapes: the busiest SM may stream at most 25% more weight
  // bytes than an even share (split K where the output has few tiles).
  for (int sms : {kH200Sms, kA100Sms}) {
    for (int64_t n : {576, 2048, 4096, 6144, 12288, 16384}) {
      for (int64_t m : {1, 16}) {
        const GemmPlan plan = ChooseGemmPlan(Dense(m, n, 6144, sms));
        const TileConfig& c = GetTileConfig(plan.config);
        const int64_t blocks = plan.token_tiles * plan.row_tiles * plan.splits;
        const int64_t stages_per_block = (KStages(6144, 1, c.sub) + plan.splits - 1) / plan.splits;
        const double busiest = static_cast<double>((blocks + sms - 1) / sms) * stages_per_block * c.block_rows *
                               c.row_bytes_per_stage();
        const double even = static_cast<double>(n) * 6144 / sms;
        EXPECT_LE(busiest, 1.25 * even) << "n=" << n << " m=" << m << " sms=" << sms << " " << plan;
      }
    }
  }
  // kv_a (576 rows) cannot fill 132 SMs without splitting.
  EXPECT_GT(ChooseGemmPlan(Dense(1, 576, 6144)).splits, 4);
}

TEST(GemmConfig, SplitsRespectWorkspaceAndK) {
  for (size_t ws : {size_t{0}, size_t{4096}, size_t{1} << 20, kWorkspace}) {
    for (int64_t m : {1, 16, 64, 256}) {
      for (int64_t k : {128, 512, 2048, 6144}) {
        const GemmPlan plan = ChooseGemmPlan(Dense(m, 576, k, kH200Sms, ws));
        EXPECT_LE(plan.workspace_bytes, ws) << plan;
        EXPECT_GE(plan.splits, 1);
        EXPECT_LE(plan.splits, std::max<int64_t>(1, KStages(k, 1) / 4)) << plan;
        if (plan.splits == 1) {
          EXPECT_EQ(plan.workspace_bytes, 0u);
        }
        EXPECT_EQ(plan.workspace_bytes,
                  SplitWorkspaceBytes(GetTileConfig(plan.config), plan.token_tiles * plan.row_tiles, plan.splits));
      }
    }
  }
  EXPECT_EQ(ChooseGemmPlan(Dense(1, 576, 6144, kH200Sms, 0)).splits, 1);
}

// With room for split partials the model still keeps these grouped shapes
// unsplit (what the grouped sweep measured fastest).
TEST(GemmConfig, GroupedDecodeAndPrefillKeepOneSplit) {
  GemmProblem p = Dense(2, 4096, 6144);
  p.grouped = true;
  p.groups = 221;
  p.silu_mul = true;
  GemmPlan plan = ChooseGemmPlan(p);
  EXPECT_EQ(plan.splits, 1);
  EXPECT_EQ(GetTileConfig(plan.config).block_tokens, 8);
  EXPECT_EQ(plan.workspace_bytes, 0u);
  p.m = 128;  // prefill: ~128 rows per expert
  p.groups = 256;
  plan = ChooseGemmPlan(p);
  EXPECT_EQ(plan.splits, 1);
  EXPECT_GE(GetTileConfig(plan.config).block_tokens, 64);
}

TEST(GemmConfig, MakeGemmPlanClampsSplits) {
  const GemmProblem p = Dense(5, 200, 128);
  const GemmPlan plan = MakeGemmPlan(p, TileConfigId::kT64, 9);
  EXPECT_EQ(plan.splits, 2);  // k = 128 has two e4m3 stages
  EXPECT_EQ(plan.token_tiles, 1);
  EXPECT_EQ(plan.row_tiles, 4);
  EXPECT_GT(plan.workspace_bytes, 0u);
  GemmProblem g = p;
  g.grouped = true;  // grouped launches split K the same way (MoeGroupedGemmParams::split_workspace)
  EXPECT_EQ(MakeGemmPlan(g, TileConfigId::kT8, 4).splits, 2);
}

// Choices that were the fastest measured ones in the H200 sweeps
// (bench/gemm/calibration: M <= 16 on 2026-12-02, M = 2048 on 2026-11-30),
// which the fitted model reproduces.
TEST(GemmConfig, PicksTheMeasuredBestOnTheH200) {
  struct Case {
    int64_t m, n, k;
    TileConfigId config;
    int splits;
  };
  const Case cases[] = {
      {1, 12288, 6144, TileConfigId::kT8R128M2F, 4},  // 26.0 µs (T8W4/s2 33.7)
      {1, 6144, 12288, TileConfigId::kT8R128M2F, 8},  // 25.8 µs (T8W4/s4 33.4)
      {1, 6144, 16384, TileConfigId::kT8R128M2F, 8},  // 33.0 µs (T8W4/s4 40.9)
      {1, 4096, 6144, TileConfigId::kT8R128M2F, 8},   // 12.4 µs
      {1, 28672, 512, TileConfigId::kT8R128M2F, 1},   // 8.5 µs (T8 9.9): K = 512 is too short for wide stages
      {1, 6144, 2048, TileConfigId::kT8, 4},          // 9.1 µs (T8W2Q/s4 the same)
      {16, 12288, 6144, TileConfigId::kT16W4F, 2},    // 29.3 µs (T16W4/s1 37.8)
      {16, 6144, 16384, TileConfigId::kT16W4F, 4},    // 35.8 µs (T16W4/s8 46.7)
      {16, 16384, 2048, TileConfigId::kT16W4F, 1},    // 15.7 µs
      {16, 6144, 2048, TileConfigId::kT16, 4},        // 10.1 µs
      // M = 64 (2026-12-07, weights tiled across rows): T64R4W2F 56.2 µs
      // (T64W2/s2 75.6, the plan before) and 70.4 (T64W2/s4 96.0).
      {64, 12288, 6144, TileConfigId::kT64R4W2F, 4},
      {64, 6144, 16384, TileConfigId::kT64R4W2F, 8},
      // M = 2048 (2026-12-03): T128W2F 1103.2 / 1076.1 µs (T128W2 1157.8 /
      // 1131.7, T128B2 1164.6 / 1162.3).
      {2048, 12288, 6144, TileConfigId::kT128W2F, 1},
      {2048, 6144, 16384, TileConfigId::kT128W2F, 1},
  };
  for (const Case& c : cases) {
    const GemmPlan plan = ChooseGemmPlan(Dense(c.m, c.n, c.k));
    EXPECT_EQ(plan.config, c.config) << c.m << "x" << c.n << "x" << c.k << ": " << plan;
    EXPECT_EQ(plan.splits, c.splits) << c.m << "x" << c.n << "x" << c.k << ": " << plan;
  }
  // The fused A projection (three e4m3 segments and a bf16 one, K = 6144):
  // T8W2QF/s12, 11.1 µs (T8W4/s6 12.0; T32/s9, which the model preferred
  // before it was kept to the timed split factors, 13.9).
  GemmProblem a = Dense(1, 2048, 6144);
  a.num_segments = 4;
  a.segments[1] = {576, 1};
  a.segments[2] = {128, 1};
  a.segments[3] = {32, 2};
  const GemmPlan fused = ChooseGemmPlan(a);
  EXPECT_EQ(fused.config, TileConfigId::kT8W2QF) << fused;
  EXPECT_EQ(fused.splits, 12) << fused;
  // Grouped MoE gate/up (2048 + 2048 rows, K = 6144): T8R128M2F at 64
  // tokens (2.14 ms for gate/up + down vs 2.73 for T8W4); at 4096 tokens
  // T64R4W2F (GroupedPrefillPicksTheMeasuredBest below).
  GemmProblem g = Dense(2, 2048, 6144);
  g.silu_mul = true;
  g.grouped = true;
  g.groups = 226;
  EXPECT_EQ(ChooseGemmPlan(g).config, TileConfigId::kT8R128M2F);
  g.m = 128;
  g.groups = 256;
  EXPECT_EQ(ChooseGemmPlan(g).config, TileConfigId::kT64R4W2F);
}

// Rows per expert spread around their mean (Poisson): a group of mean m
// fills more than ceil(m / bt) tiles on average. Values from the sum
// written out independently (Python, 2026-12-03).
TEST(GemmConfig, ExpectedTokenTilesFollowThePoissonSpread) {
  EXPECT_NEAR(ExpectedTokenTilesPerGroup(128, 128), 1.4765, 1e-3);  // a 4096-token chunk of GLM-5
  EXPECT_NEAR(ExpectedTokenTilesPerGroup(128, 160), 1.0027, 1e-3);
  EXPECT_NEAR(ExpectedTokenTilesPerGroup(64, 64), 1.4668, 1e-3);
  EXPECT_NEAR(ExpectedTokenTilesPerGroup(8, 8), 1.4113, 1e-3);
  EXPECT_NEAR(ExpectedTokenTilesPerGroup(2, 8), 1.0003, 1e-3);
  EXPECT_NEAR(ExpectedTokenTilesPerGroup(1000, 128), 8.2182, 1e-3);  // log space: e^-1000 underflows
  EXPECT_EQ(ExpectedTokenTilesPerGroup(0, 128), 1.0);
  EXPECT_GT(ExpectedTokenTilesPerGroup(129, 128), ExpectedTokenTilesPerGroup(128, 128));
  // Against the plain sum in log space (a log and an exp per term: the
  // earlier implementation), over the means the engine poses.
  auto plain = [](double m, int bt) {
    const double limit = m + 12.0 * std::sqrt(m) + 20.0;
    double log_p = -m, tiles = 0.0;
    for (int64_t n = 1; n <= static_cast<int64_t>(limit); ++n) {
      log_p += std::log(m / static_cast<double>(n));
      tiles += std::exp(log_p) * static_cast<double>((n + bt - 1) / bt);
    }
    return tiles / (1.0 - std::exp(-m));
  };
  for (double m : {0.3, 1.0, 2.5, 8.0, 31.9, 64.0, 128.0, 200.5, 1000.0, 5000.0}) {
    for (int bt : {8, 32, 64, 128, 160}) {
      const double want = plain(m, bt);
      EXPECT_NEAR(ExpectedTokenTilesPerGroup(m, bt), want, 1e-10 * want) << "mean " << m << " tiles of " << bt;
    }
  }
}

// The grouped MoE GEMMs at decode as MoeGroupedGemmPlan poses them (no
// split workspace: split-K measured slower for every grouped decode shape's
// best tile), against the fastest tiles of the H200 sweep of 2026-12-02
// (bench/gemm/calibration/h200_sweep_2026-12-02_grouped.txt, graph replays).
TEST(GemmConfig, GroupedDecodePicksTheMeasuredBest) {
  struct Case {
    int64_t tokens;
    bool gate_up;
    TileConfigId config;
  };
  const Case cases[] = {
      {1, true, TileConfigId::kT8W2QF},      // 60.4 us (T8R128M2F 77.1: one thin wave)
      {1, false, TileConfigId::kT8R128M2F},  // 33.5 us (T8W2Q 35.0)
      {8, true, TileConfigId::kT8R128M2F},   // 359.3 us (T8W2Q 361.2)
      {8, false, TileConfigId::kT8R128M2F},  // 177.6 us (T8W2QF 185.0)
      {64, true, TileConfigId::kT8R128M2F},  // 1493.7 us (T8W4 1707.1)
      {64, false, TileConfigId::kT8R128M2F}, // 718.9 us (T8W2Q 753.1)
  };
  for (const Case& c : cases) {
    const int64_t rows = c.tokens * 8;  // top-8 of 256 experts
    GemmProblem g = Dense(std::max<int64_t>(1, rows / 256), c.gate_up ? 2048 : 6144, c.gate_up ? 6144 : 2048,
                          kH200Sms, /*ws=*/0);
    g.silu_mul = c.gate_up;
    g.grouped = true;
    g.groups = std::min<int64_t>(256, rows);
    const GemmPlan plan = ChooseGemmPlan(g);
    EXPECT_EQ(plan.config, c.config) << c.tokens << " tokens, " << (c.gate_up ? "gate/up" : "down") << ": " << plan;
    EXPECT_EQ(plan.splits, 1);
  }
}

// The grouped MoE GEMMs of prefill chunks (GLM-5: 256 experts, top-8), as
// the decode cases are posed, against gemm_bench's plans and sweeps (whole
// gate/up + down in us) and engine_bench: at 256 tokens (8 rows per expert)
// the 8-token decode tile stays (16-token tile 2.7 % slower; 2026-12-03,
// H200); at 1024 and 2048 tokens (32 and 64 rows an expert) the 64-token
// tiles of 128 rows (2048: gate/up T64R4W2F 4310 against T128W2F's 5843,
// down 2590 against 3035, every configuration forced; planned, 1024 0.889x
// and 2048 0.800x the plan before them); at 4096 gate/up T64R4W2F, down the
// 128-token tile with its tail split (1.015x the time of T128W2F + tail on
// both with gemm_bench's even routing, but the FP8 layer's 4096-token
// prefill chunk 1.09x faster in engine_bench); at 8192 (256 rows) the
// 128-token tile (H100 running this sm80 code, 2026-12-07).
TEST(GemmConfig, GroupedPrefillPicksTheMeasuredBest) {
  struct Case {
    int64_t tokens;
    TileConfigId gate_up, down;
  };
  const Case cases[] = {
      {256, TileConfigId::kT8R128M2F, TileConfigId::kT8R128M2F},  // 2771 us (T16W4F 2847)
      {1024, TileConfigId::kT16W4F, TileConfigId::kT64R4W2F},     // 5538 us (T16W4F both 6229)
      {2048, TileConfigId::kT64R4W2F, TileConfigId::kT64R4W2F},   // 6535 us (T128W2F + tail 8168)
      {4096, TileConfigId::kT64R4W2F, TileConfigId::kT128W2F},    // 11065 us (T128W2F + tail 10901)
      {8192, TileConfigId::kT128W2F, TileConfigId::kT128W2F},     // 19994 us
  };
  for (const Case& c : cases) {
    for (bool gate_up : {true, false}) {
      const int64_t rows = c.tokens * 8;
      GemmProblem g = Dense(rows / 256, gate_up ? 2048 : 6144, gate_up ? 6144 : 2048, kH200Sms, /*ws=*/0);
      g.silu_mul = gate_up;
      g.grouped = true;
      g.groups = 256;
      const GemmPlan plan = ChooseGemmPlan(g);
      EXPECT_EQ(plan.config, gate_up ? c.gate_up : c.down)
          << c.tokens << " tokens, " << (gate_up ? "gate/up" : "down") << ": " << plan;
    }
  }
}

// Only the split factors the calibration sweeps timed.
TEST(GemmConfig, SplitsAreTheTimedFactors) {
  for (int64_t m : {1, 8, 16, 64}) {
    for (int64_t n : {576, 2048, 6144, 28672}) {
      for (int64_t k : {512, 2048, 6144, 16384}) {
        const int s = ChooseGemmPlan(Dense(m, n, k)).splits;
        EXPECT_TRUE(s == 1 || s == 2 || s == 3 || s == 4 || s == 6 || s == 8 || s == 12 || s == 16)
            << m << "x" << n << "x" << k << ": " << s;
      }
    }
  }
}

TEST(GemmConfig, Deterministic) {
  const GemmProblem p = Dense(37, 6144, 16384);
  const GemmPlan a = ChooseGemmPlan(p), b = ChooseGemmPlan(p);
  EXPECT_EQ(a.config, b.config);
  EXPECT_EQ(a.splits, b.splits);
  std::ostringstream os;
  os << a;
  EXPECT_FALSE(os.str().empty());
}

TEST(GemmConfig, StreamPlanFillsTheGpuInOneWave) {
  constexpr int kSms = 132;  // the H200
  const int64_t fused_a[] = {2048, 576, 160};  // GLM-5's q_a | kv_a | indexer parts (2784 rows)
  StreamPlan plan = ChooseStreamPlan({.m = 1, .rows = fused_a, .num_segments = 3}, kSms);
  EXPECT_EQ(plan.streams, 2);  // one token: two K halves a fragment, 8 rows a block
  EXPECT_EQ(plan.tile_rows, 8);
  EXPECT_EQ(plan.row_tiles, 256 + 72 + 20);
  EXPECT_EQ(plan.warps, 4);  // 348 x 8 warps would not all be resident
  EXPECT_LE(plan.row_tiles * plan.warps, kSms * kStreamWarpsPerSm);
  const int64_t q_b[] = {16384};
  plan = ChooseStreamPlan({.m = 4, .rows = q_b}, kSms);
  EXPECT_EQ(plan.streams, 2);
  EXPECT_EQ(plan.row_tiles, 2048);
  EXPECT_EQ(plan.warps, 1);  // already a block a warp
  plan = ChooseStreamPlan({.m = 5, .rows = q_b}, kSms);
  EXPECT_EQ(plan.streams, 1);  // 5 tokens: 16 rows a block
  EXPECT_EQ(plan.tile_rows, 16);
  EXPECT_EQ(plan.row_tiles, 1024);
  EXPECT_EQ(plan.warps, 2);
  EXPECT_EQ(plan.token_frags, 1);
  // Beyond 8 tokens: an 8-token B fragment per 8 tokens, the same rows a block.
  for (int64_t m : {9, 16, 17, 24, 25, 32}) {
    plan = ChooseStreamPlan({.m = m, .rows = q_b}, kSms);
    EXPECT_EQ(plan.streams, 1) << m;
    EXPECT_EQ(plan.token_frags, (m + 7) / 8) << m;
    EXPECT_EQ(plan.row_tiles, 1024) << m;
  }
  EXPECT_EQ(kStreamMaxDenseTokens, 8 * kStreamMaxTokenFrags);
  const int64_t tiny[] = {9};
  plan = ChooseStreamPlan({.m = 1, .rows = tiny}, kSms);
  EXPECT_EQ(plan.row_tiles, 2);
  EXPECT_EQ(plan.warps, 8);
  // SiLU·mul: one K half, 8 outputs (gate and up rows) a block.
  const int64_t shared_expert[] = {2048};
  plan = ChooseStreamPlan({.m = 1, .rows = shared_expert, .silu = true}, kSms);
  EXPECT_EQ(plan.streams, 1);
  EXPECT_EQ(plan.tile_rows, 8);
  EXPECT_EQ(plan.row_tiles, 256);
  EXPECT_EQ(plan.warps, 8);
  // Grouped (the width given, moe.h's kMoeStreamAutoWarps): one K half.
  plan = MakeStreamPlan({.m = 1, .rows = shared_expert, .silu = true, .grouped = true}, 4);
  EXPECT_EQ(plan.streams, 1);
  EXPECT_EQ(plan.warps, 4);
  EXPECT_EQ(plan.row_tiles, 256);
  // Too many tiles for one wave at any width: one warp a block.
  const int64_t huge[] = {int64_t{1} << 20};
  EXPECT_EQ(ChooseStreamPlan({.m = 1, .rows = huge}, kSms).warps, 1);
  EXPECT_EQ(MakeStreamPlan({.m = 8, .rows = huge}, 4).warps, 4);
  EXPECT_EQ(MakeStreamPlan({.m = 8, .rows = huge}, 4).row_tiles, (int64_t{1} << 20) / 16);
  // The widths a launcher may be forced to (both launchers refuse the rest).
  for (int w : {-1, 0, 1, 2, 4, 8}) EXPECT_TRUE(ValidForcedStreamWarps(w)) << w;
  for (int w : {-2, 3, 6, 16}) EXPECT_FALSE(ValidForcedStreamWarps(w)) << w;
}

TEST(GemmConfig, FindsConfigurationsByName) {
  for (int i = 0; i < kNumTileConfigs; ++i) EXPECT_EQ(FindTileConfig(kTileConfigs[i].name), i);
  EXPECT_EQ(FindTileConfig("T16W4"), static_cast<int>(TileConfigId::kT16W4));
  EXPECT_EQ(FindTileConfig("T16W4f"), -1);
  EXPECT_EQ(FindTileConfig(""), -1);
  EXPECT_EQ(FindTileConfig(nullptr), -1);
}

// The grouped work lists' bounds (the MoE launchers size and check their
// workspace by them): every expert's rows in whole tiles; a tail list holds
// each expert's last partial tile below the bound.
TEST(GemmConfig, GroupedWorkListBounds) {
  // 4096 tokens x top-8 over 256 experts: 32768 / 128 tiles + one partial per expert.
  EXPECT_EQ(MaxGroupedWorkEntries(32768, 256, 128), 256 + 256);
  EXPECT_EQ(MaxGroupedWorkEntries(5, 256, 8), 1 + 5);  // at most one expert per row
  // Tails of < 32 rows in 16-row entries: two an expert; < 17 rows: one.
  EXPECT_EQ(MaxGroupedTailEntries(32768, 256, 32, 128, 16), 256 * 2);
  EXPECT_EQ(MaxGroupedTailEntries(32768, 256, 17, 128, 16), 256);
  // The main tile bounds a tail too (a partial tile has fewer rows than it).
  EXPECT_EQ(MaxGroupedTailEntries(32768, 256, 1000, 32, 8), 256 * 4);
  EXPECT_EQ(MaxGroupedTailEntries(3, 256, 32, 128, 16), 3 * 2);
  EXPECT_EQ(MaxGroupedTailEntries(32768, 256, 1, 128, 16), 0);  // no row is below 1
  // The two lists in a workspace: 16 bytes an entry and a 16-byte count after each.
  EXPECT_EQ(GroupedTailSplitBytes(512, 512), size_t{(512 + 1 + 512 + 1) * 16});
  EXPECT_EQ(GroupedTailSplitBytes(0, 0), size_t{32});
  // Brute force: every split of up to 40 rows over 3 experts fits the bounds.
  for (int a = 0; a <= 40; ++a)
    for (int b = 0; b <= 40 - a; ++b) {
      const int c = 40 - a - b;
      int main_entries = 0, tail_entries = 0;
      for (int rows : {a, b, c}) {
        const int rem = rows % 16;
        const bool tail = rem > 0 && rem < 12;
        main_entries += (rows - (tail ? rem : 0) + 15) / 16;
        tail_entries += tail ? (rem + 3) / 4 : 0;
      }
      EXPECT_LE(main_entries, MaxGroupedWorkEntries(40, 3, 16));
      EXPECT_LE(tail_entries, MaxGroupedTailEntries(40, 3, 12, 16, 4));
    }
}

// The grouped launches' block order: every (entry, row tile) of the grid
// exactly once, one entry's tiles at consecutive linear indices (so the
// blocks resident together share its rows), entries in order (so the
// entries past a launch's work count are the grid's last blocks).
TEST(GroupedBlockOrder, EachEntrysTilesRunTogether) {
  for (const auto& [entries, tiles] : {std::pair{1u, 1u}, {7u, 1u}, {1u, 48u}, {256u, 32u}, {513u, 48u}, {5u, 3u}}) {
    std::vector<int> seen(static_cast<size_t>(entries) * tiles, 0);
    unsigned prev_entry = 0, prev_tile = 0;
    for (unsigned y = 0; y < tiles; ++y) {
      for (unsigned x = 0; x < entries; ++x) {
        const unsigned linear = y * entries + x;  // the order blocks start in
        const GroupedBlock b = GroupedBlockAt(x, y, entries, tiles);
        ASSERT_LT(b.entry, entries);
        ASSERT_LT(b.row_tile, tiles);
        ++seen[static_cast<size_t>(b.entry) * tiles + b.row_tile];
        if (linear > 0) {
          const bool next_tile = b.entry == prev_entry && b.row_tile == prev_tile + 1;
          const bool next_entry = b.entry == prev_entry + 1 && b.row_tile == 0 && prev_tile == tiles - 1;
          EXPECT_TRUE(next_tile || next_entry) << entries << " x " << tiles << " at " << linear;
        } else {
          EXPECT_EQ(b.entry, 0u);
          EXPECT_EQ(b.row_tile, 0u);
        }
        prev_entry = b.entry;
        prev_tile = b.row_tile;
      }
    }
    for (int n : seen) EXPECT_EQ(n, 1) << entries << " x " << tiles;
  }
}

}  // namespace
}  // namespace spar::gemm
