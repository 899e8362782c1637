// W8A16 GEMM against kernels/ref on fresh random inputs: every tile
// configuration (forced), split-K, e4m3 and bf16 weights, SiLU·mul and
// residual epilogues, the fused A projection (mixed-dtype segments), partial
// tiles in M, N and the last scale block, K = 128, fp32 output; plus an
// exact test (small integers, power-of-two scales: bit-exact fp32 result).
// The streaming decode kernel's plans: w8a16_stream_test.cc.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/gemm/w8a16_gemm.h"
#include "kernels/ref/moe_ref.h"
#include "tests/kernels/gemm/gemm_test_util.h"
#include "tests/kernels/gemm/w8a16_gemm_case.h"
#include "tests/kernels/gpu_test_util.h"

namespace spar {
namespace {

using testing::DeviceArray;
using testing::DeviceWeight;
using testing::HostWeight;
using testing::MakeActivations;
using testing::MakeWeight;
using testing::RefGemm;

using testing::Describe;
using testing::GemmCase;
using testing::kBf16;
using testing::kFp8;
using testing::kWorkspaceBytes;
using testing::RunAndCheck;

TEST(Sm80_W8A16Gemm, ExactEveryConfigE4m3) {
  SPAR_REQUIRE_GPU();
  const HostWeight w = MakeWeight(kFp8, 200, 512, 11, /*exact=*/true);
  for (int cfg = 0; cfg < gemm::kNumTileConfigs; ++cfg) {
    for (int splits : {1, 2}) {
      for (int64_t m : {1, 7, 16, 37, 64, 129}) {
        GemmCase c;
        c.m = m;
        c.k = 512;
        c.segments = {&w};
        c.y_fp32 = true;
        c.exact = true;
        c.force_config = cfg;
        c.force_splits = splits;
        c.seed = 100 + m;
        RunAndCheck(c);
      }
    }
  }
}

TEST(Sm80_W8A16Gemm, ExactEveryConfigBf16) {
  SPAR_REQUIRE_GPU();
  const HostWeight w = MakeWeight(kBf16, 136, 256, 12, /*exact=*/true);
  for (int cfg = 0; cfg < gemm::kNumTileConfigs; ++cfg) {
    for (int splits : {1, 2}) {
      for (int64_t m : {1, 9, 64, 130}) {
        GemmCase c;
        c.m = m;
        c.k = 256;
        c.segments = {&w};
        c.y_fp32 = true;
        c.exact = true;
        c.force_config = cfg;
        c.force_splits = splits;
        c.seed = 200 + m;
        RunAndCheck(c);
      }
    }
  }
}

TEST(Sm80_W8A16Gemm, RandomEveryConfigE4m3) {
  SPAR_REQUIRE_GPU();
  const HostWeight w = MakeWeight(kFp8, 328, 1024, 13);
  for (int cfg = 0; cfg < gemm::kNumTileConfigs; ++cfg) {
    for (int splits : {1, 4}) {
      for (int64_t m : {1, 16, 63, 200}) {
        GemmCase c;
        c.m = m;
        c.k = 1024;
        c.segments = {&w};
        c.force_config = cfg;
        c.force_splits = splits;
        c.seed = 300 + m;
        RunAndCheck(c);
      }
    }
  }
}

TEST(Sm80_W8A16Gemm, SiluMulWithResidualEveryConfig) {
  SPAR_REQUIRE_GPU();
  // n = 200 gate rows: the last tile and the last scale block are partial.
  const HostWeight gate = MakeWeight(kFp8, 200, 512, 21);
  const HostWeight up = MakeWeight(kFp8, 200, 512, 22);
  const HostWeight gate16 = MakeWeight(kBf16, 72, 256, 23);
  const HostWeight up16 = MakeWeight(kBf16, 72, 256, 24);
  for (int cfg = 0; cfg < gemm::kNumTileConfigs; ++cfg) {
    for (int splits : {1, 2}) {
      for (int64_t m : {3, 64, 150}) {
        GemmCase c;
        c.m = m;
        c.k = 512;
        c.segments = {&gate};
        c.up = &up;
        c.residual = true;
        c.force_config = cfg;
        c.force_splits = splits;
        c.seed = 400 + m;
        RunAndCheck(c);
        GemmCase b = c;
        b.k = 256;
        b.segments = {&gate16};
        b.up = &up16;
        b.residual = splits == 1;
        RunAndCheck(b);
      }
    }
  }
}

// K that is no multiple of 64 (a q_lora_rank of 96, say): the weights'
// rows are stored zero-padded to whole 64-byte stages, X past k is never
// read; every configuration whose stage divides the padded row, split-K
// included, N tails too.
TEST(Sm80_W8A16Gemm, KTailsEveryConfig) {
  SPAR_REQUIRE_GPU();
  for (const int64_t k : {8, 96, 136, 200, 1000}) {
    const HostWeight w8 = MakeWeight(kFp8, 200, k, 40 + k);
    const HostWeight w16 = MakeWeight(kBf16, 72, k, 41 + k);
    for (const HostWeight* w : {&w8, &w16}) {
      const int64_t row_bytes = PaddedGemmRowElements(k, w->type) * (w->type == kBf16 ? 2 : 1);
      for (int cfg = 0; cfg < gemm::kNumTileConfigs; ++cfg) {
        if (row_bytes % gemm::GetTileConfig(static_cast<gemm::TileConfigId>(cfg)).row_bytes_per_stage() != 0) {
          continue;
        }
        for (int64_t m : {1, 7, 70}) {
          GemmCase c;
          c.m = m;
          c.k = k;
          c.segments = {w};
          c.force_config = cfg;
          c.force_splits = row_bytes >= 256 ? 2 : 1;
          c.seed = 700 + m + k;
          RunAndCheck(c);
        }
      }
      // The heuristic's own choice, with the SiLU·mul epilogue.
      GemmCase c;
      c.m = 3;
      c.k = k;
      c.segments = {w};
      c.up = w;
      c.seed = 800 + k;
      RunAndCheck(c);
    }
  }
}

TEST(Sm80_W8A16Gemm, FusedAProjectionMixedDtypes) {
  SPAR_REQUIRE_GPU();
  // GLM-5: q_a_proj 2048, kv_a_proj_with_mqa 576 (last scale block half
  // full), indexer wk 128 (e4m3), indexer weights_proj 32 (bf16), K = 6144.
  const int64_t k = 6144;
  const HostWeight q_a = MakeWeight(kFp8, 2048, k, 31);
  const HostWeight kv_a = MakeWeight(kFp8, 576, k, 32);
  const HostWeight wk = MakeWeight(kFp8, 128, k, 33);
  const HostWeight wp = MakeWeight(kBf16, 32, k, 34);
  for (int64_t m : {1, 16, 64, 200}) {
    GemmCase c;
    c.m = m;
    c.k = k;
    c.segments = {&q_a, &kv_a, &wk, &wp};
    c.seed = 500 + m;
    RunAndCheck(c);
  }
  // And each forced configuration at decode sizes, with split-K.
  for (int cfg = 0; cfg < gemm::kNumTileConfigs; ++cfg) {
    GemmCase c;
    c.m = 5;
    c.k = k;
    c.segments = {&kv_a, &wk, &wp};
    c.force_config = cfg;
    c.force_splits = 6;
    c.seed = 600 + cfg;
    RunAndCheck(c);
  }
}

TEST(Sm80_W8A16Gemm, KEquals128) {
  SPAR_REQUIRE_GPU();
  const HostWeight w = MakeWeight(kFp8, 256, 128, 41);
  const HostWeight w16 = MakeWeight(kBf16, 256, 128, 42);
  int ran = 0;
  for (int cfg = 0; cfg < gemm::kNumTileConfigs; ++cfg) {
    // e4m3 rows are 128 bytes: configurations with 256-byte stages refuse.
    const bool fp8_ok = gemm::GetTileConfig(static_cast<gemm::TileConfigId>(cfg)).row_bytes_per_stage() <= 128;
    for (int splits : {1, 2}) {
      GemmCase c;
      c.m = 20;
      c.k = 128;
      c.force_config = cfg;
      c.force_splits = splits;
      c.seed = 700 + cfg;
      if (fp8_ok) {
        c.segments = {&w};
        RunAndCheck(c);
        ++ran;
      }
      c.segments = {&w16};
      RunAndCheck(c);
    }
  }
  EXPECT_GE(ran, 12);
  // The heuristic never picks a configuration whose stages do not divide k.
  for (int64_t m : {1, 8, 64, 300}) {
    GemmCase c;
    c.m = m;
    c.k = 128;
    c.segments = {&w};
    c.seed = 750 + m;
    RunAndCheck(c);
  }
}

TEST(Sm80_W8A16Gemm, HeuristicShapes) {
  SPAR_REQUIRE_GPU();
  const HostWeight w = MakeWeight(kFp8, 1024, 2048, 51);
  for (int64_t m : {1, 5, 16, 64, 256, 1000}) {
    GemmCase c;
    c.m = m;
    c.k = 2048;
    c.segments = {&w};
    c.seed = 800 + m;
    RunAndCheck(c);
  }
}

TEST(Sm80_W8A16Gemm, Fp32OutputRouterLogits) {
  SPAR_REQUIRE_GPU();
  // Router: bf16 gate weight [256, k], fp32 logits.
  const HostWeight gate = MakeWeight(kBf16, 256, 1024, 61);
  for (int64_t m : {1, 33, 300}) {
    GemmCase c;
    c.m = m;
    c.k = 1024;
    c.segments = {&gate};
    c.y_fp32 = true;
    c.seed = 900 + m;
    RunAndCheck(c);
  }
}

TEST(Sm80_W8A16Gemm, SplitKIsDeterministicAndReusesWorkspace) {
  SPAR_REQUIRE_GPU();
  const int64_t m = 9, k = 2048, n = 384;
  const HostWeight w = MakeWeight(kFp8, n, k, 71);
  DeviceWeight dw;
  dw.Upload(w);
  const std::vector<float> x = MakeActivations(m, k, 72);
  DeviceArray<uint16_t> dx;
  dx.Upload(testing::ToBf16(x));
  DeviceArray<uint16_t> dy(m * n);
  DeviceArray<uint8_t> ws(kWorkspaceBytes);
  SPAR_ASSERT_CUDA(cudaMemset(ws.get(), 0, kWorkspaceBytes));
  W8A16GemmParams p;
  p.m = m;
  p.k = k;
  p.x = reinterpret_cast<const __nv_bfloat16*>(dx.get());
  p.ldx = k;
  p.segments[0] = dw.View(w);
  p.y = dy.get();
  p.ldy = n;
  p.workspace = ws.get();
  p.workspace_bytes = kWorkspaceBytes;
  p.force_config = static_cast<int>(gemm::TileConfigId::kT16);
  p.force_splits = 8;
  std::vector<uint16_t> first;
  for (int rep = 0; rep < 4; ++rep) {
    dy.Poison();
    ASSERT_TRUE(LaunchW8A16Gemm(p, nullptr).ok());
    SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<uint16_t> got = dy.Download();
    if (rep == 0) {
      first = got;
      const std::vector<float> ref = RefGemm(x, m, k, w.deq, n);
      EXPECT_LT(testing::RelativeL2(testing::FromBf16(got), ref), 4e-3);
    } else {
      EXPECT_EQ(got, first) << "split-K result changed on launch " << rep;
    }
  }
  // Counters (at offset 0 for every plan) are back at zero.
  std::vector<int32_t> counters(gemm::kMaxSplitTiles);
  SPAR_ASSERT_CUDA(cudaMemcpy(counters.data(), ws.get(), gemm::kSplitCounterBytes, cudaMemcpyDeviceToHost));
  int64_t nonzero = 0;
  for (int32_t v : counters) nonzero += v != 0;
  EXPECT_EQ(nonzero, 0);
  // One workspace serves a sequence of different split plans (the partials
  // of one plan overlap where another would have kept its counters).
  const std::vector<float> ref = RefGemm(x, m, k, w.deq, n);
  for (int rep = 0; rep < 3; ++rep) {
    for (int cfg = 0; cfg < gemm::kNumTileConfigs; ++cfg) {
      for (int splits : {2, 5, 7}) {
        W8A16GemmParams q = p;
        q.force_config = cfg;
        q.force_splits = splits;
        dy.Poison();
        ASSERT_TRUE(LaunchW8A16Gemm(q, nullptr).ok());
        SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
        EXPECT_LT(testing::RelativeL2(testing::FromBf16(dy.Download()), ref), 4e-3)
            << "cfg " << cfg << " splits " << splits << " rep " << rep;
      }
    }
  }
}

// The tiles that fold 2^120 into the block scale against unfolded twins
// (same summation order per output): the products differ by exactly 2^120
// except where the folded one is an fp32 subnormal, so the outputs agree to
// far below a bf16 ulp.
TEST(Sm80_W8A16Gemm, FoldedCandidatesEqualTheirTwins) {
  SPAR_REQUIRE_GPU();
  using gemm::TileConfigId;
  // Twins: the same K order per output (stages and warp layout do not
  // change it).
  const std::pair<TileConfigId, TileConfigId> twins[] = {
      {TileConfigId::kT16W4, TileConfigId::kT16W4F},
      {TileConfigId::kT8W2Q, TileConfigId::kT8W2QF},
      {TileConfigId::kT8W2Q, TileConfigId::kT8R128M2F},
      {TileConfigId::kT128W2, TileConfigId::kT128W2F},
  };
  const HostWeight w = MakeWeight(kFp8, 328, 2048, 81);
  for (const auto& [plain, folded] : twins) {
    for (int64_t m : {1, 8, 13, 200}) {
      GemmCase c;
      c.m = m;
      c.k = 2048;
      c.segments = {&w};
      c.y_fp32 = true;
      c.force_config = static_cast<int>(plain);
      c.force_splits = 2;
      c.seed = 1000 + m;
      std::vector<float> a, b;
      RunAndCheck(c, nullptr, &a);
      c.force_config = static_cast<int>(folded);
      RunAndCheck(c, nullptr, &b);
      ASSERT_EQ(a.size(), b.size());
      const double scale = testing::MaxAbs(a);
      ASSERT_GT(scale, 0.0);
      double worst = 0;
      int64_t differ = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]) / scale);
        differ += a[i] != b[i];
      }
      EXPECT_LE(worst, std::ldexp(1.0, -20)) << gemm::GetTileConfig(folded).name << " m=" << m << ", " << differ
                                             << " outputs differ";
    }
  }
}

// Tiled weights (both tile orders of GemmWeightLayout) move only where each
// byte is read from, never the arithmetic: every tile configuration and
// split, every streaming plan, SiLU·mul pairs, mixed FP8 / bf16 segments, K
// tails and row counts that end inside a 16-row tile give the row-major
// result bit for bit (and each is checked against kernels/ref by RunAndCheck).
TEST(Sm80_W8A16Gemm, TiledWeightsEqualRowMajorBitForBit) {
  SPAR_REQUIRE_GPU();
  auto expect_same = [](GemmCase c) {
    std::vector<float> row_major;
    c.layout = GemmWeightLayout::kRowMajor;
    RunAndCheck(c, nullptr, &row_major);
    for (const GemmWeightLayout tiled_layout : {GemmWeightLayout::kTilesAlongK, GemmWeightLayout::kTilesAcrossRows}) {
      std::vector<float> tiled;
      c.layout = tiled_layout;
      RunAndCheck(c, nullptr, &tiled);
      ASSERT_EQ(row_major.size(), tiled.size());
      int64_t differ = 0;
      for (size_t i = 0; i < tiled.size(); ++i) differ += row_major[i] != tiled[i];
      EXPECT_EQ(differ, 0) << Describe(c) << ": tiled outputs differ from row-major";
    }
  };
  const HostWeight w = MakeWeight(kFp8, 200, 1024, 91), wb = MakeWeight(kBf16, 37, 1024, 92);
  const HostWeight gate = MakeWeight(kFp8, 200, 512, 93), up = MakeWeight(kFp8, 200, 512, 94);
  for (int cfg = 0; cfg < gemm::kNumTileConfigs; ++cfg) {
    for (int splits : {1, 3}) {
      for (int64_t m : {1, 13, 130}) {
        GemmCase c;
        c.m = m;
        c.k = 1024;
        c.segments = {&w, &wb};
        c.y_fp32 = true;
        c.force_config = cfg;
        c.force_splits = splits;
        c.seed = 3000 + m;
        expect_same(c);
        c.k = 512;
        c.segments = {&gate};
        c.up = &up;
        c.y_fp32 = false;
        c.residual = true;
        expect_same(c);
      }
    }
  }
  // K tails (k = 200 of rows padded to 256 bytes) on the tile kernel.
  const HostWeight tail = MakeWeight(kFp8, 70, 200, 95);
  for (int64_t m : {1, 9, 64}) {
    GemmCase c;
    c.m = m;
    c.k = 200;
    c.segments = {&tail};
    c.y_fp32 = true;
    c.seed = 3100 + m;
    expect_same(c);
  }
  // The streaming kernel: every block width, both fragment layouts (up to 4
  // tokens: two K halves of 8 rows; from 5: 16 rows), SiLU·mul.
  for (int warps : {1, 2, 4, 8}) {
    for (int64_t m : {1, 4, 5, 8}) {
      GemmCase c;
      c.m = m;
      c.k = 1024;
      c.segments = {&w, &wb};
      c.y_fp32 = true;
      c.force_stream_warps = warps;
      c.seed = 3200 + m;
      expect_same(c);
      c.k = 512;
      c.segments = {&gate};
      c.up = &up;
      c.y_fp32 = false;
      expect_same(c);
    }
  }
}

// Weights that are all e4m3 subnormals or the smallest normals: folded,
// they are bf16 subnormals (2^-129..2^-126) and every product an fp32
// subnormal. Tensor cores that flushed either would return zeros here.
TEST(Sm80_W8A16Gemm, SubnormalWeightsSurviveTheFold) {
  SPAR_REQUIRE_GPU();
  HostWeight w;
  w.type = kFp8;
  w.n = 136;
  w.k = 512;
  Rng rng(91);
  w.bytes.resize(w.n * w.k);
  for (auto& v : w.bytes) v = static_cast<uint8_t>(1 + rng.Below(15)) | (rng.Below(2) ? 0x80 : 0);  // exponent 0 or 1
  w.scale.resize(2 * 4);
  for (auto& sc : w.scale) sc = std::ldexp(1.0f, static_cast<int>(rng.Below(7)) - 3);
  w.deq.resize(w.n * w.k);
  DequantizeFp8Blocks(w.bytes.data(), w.scale.data(), w.n, w.k, 128, w.deq.data());
  int ran = 0;
  for (int cfg = 0; cfg < gemm::kNumTileConfigs; ++cfg) {
    const gemm::TileConfig& tc = gemm::GetTileConfig(static_cast<gemm::TileConfigId>(cfg));
    if (!tc.fold_pow2) continue;
    for (int64_t m : {1, 8}) {
      GemmCase c;
      c.m = m;
      c.k = w.k;
      c.segments = {&w};
      c.y_fp32 = true;
      c.force_config = cfg;
      c.seed = 1100 + m;
      RunAndCheck(c);  // fp32 output: within 1e-5 of the fp32 reference
      ++ran;
    }
  }
  EXPECT_GE(ran, 2);
}

TEST(Sm80_W8A16Gemm, RejectsBadParams) {
  SPAR_REQUIRE_GPU();
  DeviceArray<uint8_t> buf(1 << 20);
  W8A16GemmParams p;
  p.m = 4;
  p.k = 256;
  p.x = reinterpret_cast<const __nv_bfloat16*>(buf.get());
  p.ldx = 256;
  p.segments[0].type = GemmWeightType::kBf16;
  p.segments[0].data = buf.get();
  p.segments[0].n = 64;
  p.y = buf.get();
  p.ldy = 64;
  EXPECT_TRUE(W8A16GemmSupported(p));
  W8A16GemmParams q = p;
  q.k = 100;
  EXPECT_EQ(LaunchW8A16Gemm(q, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(W8A16GemmSupported(q));
  q = p;  // e4m3 rows of 96 bytes: not whole 64-byte stages unless stored padded
  q.k = 96;
  q.ldx = 96;
  q.segments[0].type = GemmWeightType::kFp8Block128;
  q.segments[0].scale = reinterpret_cast<const float*>(buf.get());
  EXPECT_NE(LaunchW8A16Gemm(q, nullptr).message().find("ld"), std::string::npos);
  q.segments[0].ld = PaddedGemmRowElements(96, GemmWeightType::kFp8Block128);
  EXPECT_EQ(q.segments[0].ld, 128);
  EXPECT_TRUE(W8A16GemmSupported(q));
  q = p;
  q.segments[0].type = GemmWeightType::kFp8Block128;  // no scale
  EXPECT_NE(LaunchW8A16Gemm(q, nullptr).message().find("scale"), std::string::npos);
  q = p;
  q.num_segments = 2;
  q.segments[1] = p.segments[0];
  q.epilogue = GemmEpilogue::kSiluMul;
  q.up = p.segments[0];
  EXPECT_EQ(LaunchW8A16Gemm(q, nullptr).code(), absl::StatusCode::kInvalidArgument);
  q = p;
  q.ldy = 32;
  EXPECT_NE(LaunchW8A16Gemm(q, nullptr).message().find("ldy"), std::string::npos);
  q = p;
  q.force_config = 0;
  q.force_splits = 2;  // needs a workspace
  EXPECT_NE(LaunchW8A16Gemm(q, nullptr).message().find("workspace"), std::string::npos);
  q = p;
  q.force_stream_warps = 3;
  EXPECT_NE(LaunchW8A16Gemm(q, nullptr).message().find("force_stream_warps"), std::string::npos);
  q = p;  // one layout a launch
  q.num_segments = 2;
  q.segments[1] = p.segments[0];
  q.segments[1].layout = GemmWeightLayout::kTilesAlongK;
  EXPECT_NE(LaunchW8A16Gemm(q, nullptr).message().find("segments[1].layout"), std::string::npos);
  q.segments[1].layout = static_cast<GemmWeightLayout>(7);
  EXPECT_NE(LaunchW8A16Gemm(q, nullptr).message().find("known weight layout"), std::string::npos);
  q = p;
  q.m = 0;
  q.x = nullptr;
  EXPECT_TRUE(LaunchW8A16Gemm(q, nullptr).ok());
  SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace spar
