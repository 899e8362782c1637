// The W8A16 streaming decode kernel (kernels/cuda/gemm/w8a16_stream.cu)
// against kernels/ref on fresh random inputs: every plan it may run (one or
// two K halves, one to four 8-token B fragments, every block width), and
// what the launcher gives it.
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/gemm/w8a16_gemm.h"
#include "tests/kernels/gemm/gemm_test_util.h"
#include "tests/kernels/gemm/w8a16_gemm_case.h"
#include "tests/kernels/gpu_test_util.h"

namespace spar {
namespace {

using testing::DeviceWeight;
using testing::GemmCase;
using testing::HostWeight;
using testing::kBf16;
using testing::kFp8;
using testing::MakeWeight;
using testing::RunAndCheck;

// The streaming decode kernel (up to 32 tokens): both fragment
// layouts (two K halves up to 4 tokens, 16 rows from 5), one to four token
// fragments (8 tokens each), every block width,
// rows that end inside a tile, K of 2 spans, of an odd number of spans
// (warps with no span or one more than their other half) and of a partial
// last scale block, FP8 and bf16 segments in one launch, residual and fp32
// outputs, SiLU·mul.
TEST(Sm80_W8A16Gemm, StreamKernelEveryPlan) {
  SPAR_REQUIRE_GPU();
  const HostWeight exact_w = MakeWeight(kFp8, 200, 512, 81, /*exact=*/true);
  for (int warps : {1, 2, 4, 8}) {
    for (int64_t m : {1, 2, 3, 4, 5, 8, 9, 13, 16, 17, 27, 32}) {
      GemmCase c;
      c.m = m;
      c.k = 512;
      c.segments = {&exact_w};
      c.y_fp32 = true;
      c.exact = true;
      c.force_stream_warps = warps;
      c.seed = 1000 + m;
      RunAndCheck(c);
    }
  }
  // Every segment type: the fused A projection's last part is bf16.
  for (const int64_t k : {128, 576, 2112}) {
    const HostWeight a = MakeWeight(kFp8, 328, k, 82), b = MakeWeight(kFp8, 37, k, 83), d = MakeWeight(kBf16, 136, k, 84);
    for (int warps : {1, 2, 4, 8}) {
      for (int64_t m : {1, 3, 4, 6, 8, 11, 16, 21, 32}) {
        for (int variant = 0; variant < 2; ++variant) {
          GemmCase c;
          c.m = m;
          c.k = k;
          c.segments = {&a, &b, &d};
          c.residual = variant == 0;
          c.y_fp32 = variant == 1;
          c.force_stream_warps = warps;
          c.seed = 1100 + 10 * m + variant;
          RunAndCheck(c);
        }
      }
    }
  }
  // SiLU·mul (a gate and an up row a fragment row pair), FP8 and bf16,
  // with the residual; 200 outputs: the last tile and scale block partial.
  const HostWeight gate = MakeWeight(kFp8, 200, 576, 85), up = MakeWeight(kFp8, 200, 576, 86);
  const HostWeight gate16 = MakeWeight(kBf16, 72, 256, 87), up16 = MakeWeight(kBf16, 72, 256, 88);
  for (int warps : {1, 2, 4, 8}) {
    for (int64_t m : {1, 3, 8, 12, 16, 24, 32}) {
      GemmCase c;
      c.m = m;
      c.k = 576;
      c.segments = {&gate};
      c.up = &up;
      c.residual = true;
      c.force_stream_warps = warps;
      c.seed = 1200 + m;
      RunAndCheck(c);
      c.k = 256;
      c.segments = {&gate16};
      c.up = &up16;
      RunAndCheck(c);
    }
  }
}

// What takes the streaming kernel, and that its own plan matches the tile
// kernel's result within the summation order.
TEST(Sm80_W8A16Gemm, StreamKernelTakesSmallGemmsOnly) {
  SPAR_REQUIRE_GPU();
  const HostWeight w = MakeWeight(kFp8, 256, 1024, 91), bf = MakeWeight(kBf16, 64, 1024, 92);
  DeviceWeight dw, dbf;
  dw.Upload(w);
  dbf.Upload(bf);
  W8A16GemmParams p;
  p.k = 1024;
  p.segments[0] = dw.View(w);
  for (int64_t m : {1, 8, 9, 16, 17, 32, 33}) {
    p.m = m;
    EXPECT_EQ(W8A16GemmUsesStreamKernel(p), m <= gemm::kStreamMaxDenseTokens) << m;
  }
  p.m = 1;
  p.force_config = 0;
  EXPECT_FALSE(W8A16GemmUsesStreamKernel(p)) << "a forced tile";
  p.force_config = -1;
  p.force_stream_warps = -1;
  EXPECT_FALSE(W8A16GemmUsesStreamKernel(p)) << "turned off";
  p.force_stream_warps = 0;
  p.num_segments = 2;
  p.segments[1] = dbf.View(bf);
  EXPECT_TRUE(W8A16GemmUsesStreamKernel(p)) << "a bf16 segment (the fused A projection's last)";
  p.num_segments = 1;
  p.k = 1000;  // rows of 1024 columns streamed for k = 1000: the K tail
  p.segments[0].ld = 1024;
  EXPECT_FALSE(W8A16GemmUsesStreamKernel(p)) << "padded rows";
  for (int64_t m : {1, 4, 7, 12, 16, 19, 32}) {
    std::vector<float> stream_out, tile_out;
    GemmCase c;
    c.m = m;
    c.k = 1024;
    c.segments = {&w};
    c.seed = 1300 + m;
    RunAndCheck(c, nullptr, &stream_out);
    c.force_stream_warps = -1;
    RunAndCheck(c, nullptr, &tile_out);
    EXPECT_LT(testing::RelativeL2(stream_out, tile_out), 4e-3) << m;
  }
}

}  // namespace
}  // namespace spar
