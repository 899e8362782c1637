// The W4A16 kernel's load-time repack (kernels/cuda/gemm/w4_layout.h) on the
// CPU: every code lands where the kernel's fragment reads expect it (checked
// by decoding each lane's words the way the kernel does: int4 nibbles, and
// NVFP4 words through the kernels' own nvfp4_word::E2m1PairBits), the
// inverse recovers the codes, SiLU pairs interleave gate and up by 8 rows,
// and padding contributes exactly zero.
#include "kernels/cuda/gemm/w4_layout.h"

#include <cmath>
#include <cstring>

#include "kernels/cuda/gemm/nvfp4_word.h"
#include "kernels/ref/nvfp4_ref.h"

#include "base/rng.h"
#include "gtest/gtest.h"

namespace spar::gemm {
namespace {

struct Source {
  std::vector<uint8_t> codes, zeros;
  std::vector<float> scales;
  W4Source view;
};

Source Random(int64_t rows, int64_t cols, int64_t group, uint64_t seed) {
  Source s;
  Rng rng(seed);
  for (int64_t i = 0; i < rows * cols; ++i) s.codes.push_back(static_cast<uint8_t>(rng.Below(16)));
  for (int64_t i = 0; i < rows * (cols / group); ++i) {
    s.zeros.push_back(static_cast<uint8_t>(rng.Below(17)));
    s.scales.push_back(rng.Uniform());
  }
  s.view.rows = rows;
  s.view.cols = cols;
  s.view.group = group;
  s.view.codes = s.codes.data();
  s.view.zeros = s.zeros.data();
  s.view.scales = s.scales.data();
  return s;
}

// The word lane (g, t) loads for k-step s of the chunk (rt, kc).
uint32_t LaneWord(const W4Packed& p, int64_t rt, int64_t kc, int g, int t, int s) {
  const int lane = 4 * g + t;
  const int64_t word_index = ((rt * (p.cols / kW4Chunk) + kc) * 32 + lane) * 4 + s;
  uint32_t word;
  std::memcpy(&word, p.values.data() + 4 * word_index, 4);
  return word;
}

// What the int4 kernel holds in A-register p: (word >> 4p) & 0x000F000F.
uint8_t KernelView(const W4Packed& p, int64_t rt, int64_t kc, int g, int t, int s, int reg, int half) {
  const uint32_t both = (LaneWord(p, rt, kc, g, t, s) >> (4 * reg)) & 0x000F000Fu;
  return static_cast<uint8_t>(half == 0 ? both & 0xF : both >> 16);
}

// What the NVFP4 kernels hold in A-register p: bf16 halves worth the e2m1
// value x 2^-126, as a float.
float Nvfp4KernelView(uint32_t word, int reg, int half) {
  const uint32_t pair = nvfp4_word::E2m1PairBitsOf(word, reg);
  const uint32_t bf16 = half == 0 ? pair & 0xFFFFu : pair >> 16;
  float f;
  const uint32_t bits = bf16 << 16;
  std::memcpy(&f, &bits, 4);
  return std::ldexp(f, 126);
}

TEST(W4LayoutTest, EveryFragmentHoldsTheMmaOperandItNeeds) {
  const Source src = Random(80, 256, 128, 1);
  const W4Packed p = PackW4(src.view);
  EXPECT_EQ(p.rows_padded, 128);
  EXPECT_EQ(p.values.size(), 128u * 256 / 2);
  for (int64_t rt = 0; rt < p.rows_padded / 16; ++rt) {
    for (int64_t kc = 0; kc < p.cols / kW4Chunk; ++kc) {
      for (int g = 0; g < 8; ++g) {
        for (int t = 0; t < 4; ++t) {
          for (int s = 0; s < 4; ++s) {
            for (int reg = 0; reg < 4; ++reg) {
              // mma.m16n8k16 A: a0 (row g, k 2t..), a1 (row g+8, k 2t..),
              // a2 (row g, k 2t+8..), a3 (row g+8, k 2t+8..); the permuted K
              // maps logical {2t, 2t+1} to 16t+4s+{0,1}, {2t+8, 2t+9} to +{2,3}.
              const int64_t row = rt * 16 + g + (reg % 2) * 8;
              for (int half = 0; half < 2; ++half) {
                const int64_t col = kc * kW4Chunk + 16 * t + 4 * s + (reg / 2) * 2 + half;
                const uint8_t want = row < 80 ? src.codes[row * 256 + col] : 0;
                ASSERT_EQ(KernelView(p, rt, kc, g, t, s, reg, half), want)
                    << "row " << row << " col " << col << " lane " << 4 * g + t << " step " << s;
              }
            }
          }
        }
      }
    }
  }
  // Group-major scales and zero points; padding rows scale 1, zero 0.
  for (int64_t g = 0; g < 2; ++g) {
    for (int64_t r = 0; r < 128; ++r) {
      EXPECT_EQ(p.scales[g * 128 + r], r < 80 ? src.scales[r * 2 + g] : 1.0f);
      EXPECT_EQ(p.zeros[g * 128 + r], r < 80 ? src.zeros[r * 2 + g] : 0);
    }
  }
}

TEST(W4LayoutTest, RoundTripsAndPairsGateWithUp) {
  const Source gate = Random(40, 192, 64, 2), up = Random(40, 192, 64, 3);
  const W4Packed single = PackW4(gate.view);
  const auto codes = UnpackW4Codes(single);
  for (int64_t r = 0; r < single.rows_padded; ++r) {
    for (int64_t k = 0; k < 192; ++k) ASSERT_EQ(codes[r * 192 + k], r < 40 ? gate.codes[r * 192 + k] : 0);
  }
  const W4Packed pair = PackW4SiluPair(gate.view, up.view);
  EXPECT_EQ(pair.rows, 80);
  EXPECT_EQ(pair.rows_padded, 128);
  const auto both = UnpackW4Codes(pair);
  for (int64_t r = 0; r < pair.rows_padded; ++r) {
    const int64_t q = r / 16, within = r % 16, row = 8 * q + within % 8;
    const Source& from = within < 8 ? gate : up;
    for (int64_t k = 0; k < 192; ++k) {
      ASSERT_EQ(both[r * 192 + k], row < 40 ? from.codes[row * 192 + k] : 0) << "packed row " << r;
    }
    for (int64_t g = 0; g < 3; ++g) {
      ASSERT_EQ(pair.zeros[g * 128 + r], row < 40 ? from.zeros[row * 3 + g] : 0);
    }
  }
}

TEST(W4LayoutTest, StacksPartsAlongTheOutput) {
  // Rows not a multiple of 16 or 64: part 1 starts inside a fragment, and
  // only the stack's end is padded.
  const Source a = Random(40, 256, 128, 21), b = Random(30, 256, 128, 22), c = Random(9, 256, 128, 23);
  const W4Packed p = PackW4Stacked({a.view, b.view, c.view});
  EXPECT_EQ(p.rows, 79);
  EXPECT_EQ(p.rows_padded, 128);
  const auto codes = UnpackW4Codes(p);
  for (int64_t r = 0; r < p.rows_padded; ++r) {
    const Source* from = r < 40 ? &a : r < 70 ? &b : r < 79 ? &c : nullptr;
    const int64_t row = r < 40 ? r : r < 70 ? r - 40 : r - 70;
    for (int64_t k = 0; k < 256; ++k) {
      ASSERT_EQ(codes[r * 256 + k], from != nullptr ? from->codes[row * 256 + k] : 0) << "packed row " << r;
    }
    for (int64_t g = 0; g < 2; ++g) {
      ASSERT_EQ(p.zeros[g * 128 + r], from != nullptr ? from->zeros[row * 2 + g] : 0) << r;
      ASSERT_EQ(p.scales[g * 128 + r], from != nullptr ? from->scales[row * 2 + g] : 1.0f) << r;
    }
  }
  // What cannot share one packing: other widths, groups, formats, global scales.
  EXPECT_TRUE(W4CanStack(a.view, b.view));
  const Source wide = Random(8, 512, 128, 24), other_group = Random(8, 256, 64, 25);
  EXPECT_FALSE(W4CanStack(a.view, wide.view));
  EXPECT_FALSE(W4CanStack(a.view, other_group.view));
  W4Source f1 = a.view, f2 = b.view;
  f1.fp4 = f2.fp4 = true;
  f1.global_scale = 0.5f;
  f2.global_scale = 0.25f;
  EXPECT_FALSE(W4CanStack(a.view, f1));
  EXPECT_FALSE(W4CanStack(f1, f2));
  f2.global_scale = 0.5f;
  EXPECT_TRUE(W4CanStack(f1, f2));
}

TEST(W4LayoutTest, Nvfp4WordsWidenToTheirValues) {
  // Every code in every register and half, the other seven codes random:
  // the kernels' arithmetic gives that code's value and nothing else.
  Rng rng(7);
  for (int reg = 0; reg < 4; ++reg) {
    for (int half = 0; half < 2; ++half) {
      for (int code = 0; code < 16; ++code) {
        for (int trial = 0; trial < 8; ++trial) {
          uint8_t codes[4][2];
          for (auto& r : codes) {
            for (auto& c : r) c = static_cast<uint8_t>(rng.Below(16));
          }
          codes[reg][half] = static_cast<uint8_t>(code);
          const uint32_t word = nvfp4_word::PackWord(codes);
          for (int r = 0; r < 4; ++r) {
            for (int h = 0; h < 2; ++h) {
              ASSERT_EQ(nvfp4_word::CodeOf(word, r, h), codes[r][h]);
              const float got = Nvfp4KernelView(word, r, h), want = ref::E2m1ToFloat(codes[r][h]);
              // -0 and +0 are both fine for the mma; the bits must still be the code's.
              ASSERT_EQ(got, want) << "register " << r << " half " << h << " code " << int{codes[r][h]};
              ASSERT_EQ(std::signbit(got), (codes[r][h] & 8) != 0);
            }
          }
        }
      }
    }
  }
}

TEST(W4LayoutTest, Nvfp4FragmentsHoldTheirCodes) {
  Source s = Random(24, 128, 16, 5);
  std::vector<uint8_t> fp4_scales(24 * 8, 0x38);
  W4Source v = s.view;
  v.fp4 = true;
  v.fp4_scales = fp4_scales.data();
  const W4Packed p = PackW4(v);
  for (int64_t rt = 0; rt < p.rows_padded / 16; ++rt) {
    for (int64_t kc = 0; kc < p.cols / kW4Chunk; ++kc) {
      for (int g = 0; g < 8; ++g) {
        for (int t = 0; t < 4; ++t) {
          for (int st = 0; st < 4; ++st) {
            const uint32_t word = LaneWord(p, rt, kc, g, t, st);
            for (int reg = 0; reg < 4; ++reg) {
              const int64_t row = rt * 16 + g + (reg % 2) * 8;
              for (int half = 0; half < 2; ++half) {
                const int64_t col = kc * kW4Chunk + 16 * t + 4 * st + (reg / 2) * 2 + half;
                const uint8_t want = row < 24 ? s.codes[row * 128 + col] : 0;
                ASSERT_EQ(Nvfp4KernelView(word, reg, half), ref::E2m1ToFloat(want)) << "row " << row << " col " << col;
              }
            }
          }
        }
      }
    }
  }
  const auto codes = UnpackW4Codes(p);
  for (int64_t r = 0; r < p.rows_padded; ++r) {
    for (int64_t k = 0; k < 128; ++k) ASSERT_EQ(codes[r * 128 + k], r < 24 ? s.codes[r * 128 + k] : 0);
  }
}

TEST(W4LayoutTest, Nvfp4ScalesAndSupportedShapes) {
  Source s = Random(16, 128, 16, 4);
  std::vector<uint8_t> fp4_scales(16 * 8);
  for (size_t i = 0; i < fp4_scales.size(); ++i) fp4_scales[i] = static_cast<uint8_t>(0x30 + i % 16);
  W4Source v = s.view;
  v.fp4 = true;
  v.fp4_scales = fp4_scales.data();
  v.global_scale = 0.5f;
  const W4Packed p = PackW4(v);
  EXPECT_EQ(p.group, 16);
  EXPECT_EQ(p.global_scale, 0.5f);
  for (int64_t r = 0; r < 64; ++r) {
    for (int64_t b = 0; b < 8; ++b) EXPECT_EQ(p.fp4_scales[r * 8 + b], r < 16 ? fp4_scales[r * 8 + b] : 0);
  }
  EXPECT_TRUE(W4LayoutSupports(6144, 128, false));
  EXPECT_TRUE(W4LayoutSupports(192, 64, false));
  EXPECT_FALSE(W4LayoutSupports(192, 32, false));   // a k-step spans 64 columns
  EXPECT_FALSE(W4LayoutSupports(96, 96, false));
  EXPECT_TRUE(W4LayoutSupports(192, 16, true));
  EXPECT_FALSE(W4LayoutSupports(200, 16, true));
  EXPECT_EQ(W4PackedBytes(2048, 6144, 128, false), 2048 * 3072 + 2048 * 48 * 5);
  EXPECT_EQ(W4PackedBytes(32, 6144, 16, true), 64 * 3072 + 64 * 384 + 4);
}

}  // namespace
}  // namespace spar::gemm
