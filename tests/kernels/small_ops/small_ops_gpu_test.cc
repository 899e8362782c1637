// RMSNorm (+ residual), LayerNorm, RoPE, embedding gather and SiLU·mul
// against kernels/ref on fresh random bf16 inputs.
#include "kernels/cuda/small_ops/small_ops.h"

#include <cuda_bf16.h>

#include <cmath>
#include <vector>

#include "base/numeric.h"
#include "base/rng.h"
#include "gtest/gtest.h"
#include "kernels/ref/moe_ref.h"
#include "kernels/ref/norm_ref.h"
#include "kernels/ref/rope_ref.h"
#include "tests/kernels/gpu_test_util.h"

namespace spar {
namespace {

using testing::DeviceArray;

std::vector<float> RandomBf16(size_t n, uint64_t seed, float lo, float hi) {
  std::vector<float> v = testing::RandomFloats(n, seed, lo, hi);
  for (auto& x : v) x = RoundToBf16(x);
  return v;
}

const __nv_bfloat16* Bf(const DeviceArray<uint16_t>& a) { return reinterpret_cast<const __nv_bfloat16*>(a.get()); }
__nv_bfloat16* Bf(DeviceArray<uint16_t>& a) { return reinterpret_cast<__nv_bfloat16*>(a.get()); }

// Outputs are bf16: compare with the fp32 reference to within a little more
// than one bf16 rounding (2^-8 relative) per element.
void ExpectBf16Close(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float tol = std::fabs(want[i]) * (1.0f / 128.0f) + 1e-6f;
    if (!(std::fabs(got[i] - want[i]) <= tol)) {
      if (bad < 5) ADD_FAILURE() << what << "[" << i << "] " << got[i] << " vs " << want[i];
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0) << what;
  EXPECT_LT(testing::RelativeL2(got, want), 4e-3) << what;
}

TEST(RmsNorm, PlainAndResidual) {
  SPAR_REQUIRE_GPU();
  for (int dim : {128, 512, 1536, 2048, 6144, 7168}) {
    for (bool residual : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "dim " << dim << " residual " << residual);
      const int64_t rows = 37, ld = dim + 64;
      const auto x = RandomBf16(rows * ld, dim + 1, -3.0f, 3.0f);
      const auto res = RandomBf16(rows * dim, dim + 2, -3.0f, 3.0f);
      const auto w = RandomBf16(dim, dim + 3, 0.5f, 1.5f);
      DeviceArray<uint16_t> dx, dres, dw, dout(rows * dim);
      dx.Upload(testing::ToBf16(x));
      dres.Upload(testing::ToBf16(res));
      dw.Upload(testing::ToBf16(w));
      dout.Poison();
      RmsNormParams p;
      p.x = Bf(dx);
      p.x_stride = ld;
      if (residual) {
        p.residual = Bf(dres);
        p.residual_stride = dim;
      }
      p.weight = Bf(dw);
      p.out = Bf(dout);
      p.out_stride = dim;
      p.rows = rows;
      p.dim = dim;
      p.eps = 1e-5f;
      const absl::Status st = LaunchRmsNorm(p, nullptr);
      ASSERT_TRUE(st.ok()) << st;
      SPAR_ASSERT_CUDA(cudaGetLastError());
      SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
      // Reference: residual rounded to bf16 (what is stored), then RMSNorm.
      std::vector<float> in(rows * dim), want(rows * dim);
      for (int64_t r = 0; r < rows; ++r) {
        for (int i = 0; i < dim; ++i) {
          in[r * dim + i] = residual ? RoundToBf16(res[r * dim + i] + x[r * ld + i]) : x[r * ld + i];
        }
      }
      ref::RmsNorm(in.data(), dim, rows, dim, w.data(), 1e-5f, want.data(), dim);
      ExpectBf16Close(testing::FromBf16(dout.Download()), want, "out");
      if (residual) {
        const auto got_res = testing::FromBf16(dres.Download());
        EXPECT_EQ(got_res, in) << "residual must hold bf16(residual + x)";
      }
    }
  }
}

TEST(LayerNorm, MatchesReference) {
  SPAR_REQUIRE_GPU();
  for (int dim : {128, 512, 7168}) {
    SCOPED_TRACE(::testing::Message() << "dim " << dim);
    const int64_t rows = 41;
    const auto x = RandomBf16(rows * dim, dim + 11, -2.0f, 4.0f);  // non-zero mean
    const auto w = RandomBf16(dim, dim + 12, 0.5f, 1.5f);
    const auto b = RandomBf16(dim, dim + 13, -0.5f, 0.5f);
    DeviceArray<uint16_t> dx, dw, db, dout(rows * dim);
    dx.Upload(testing::ToBf16(x));
    dw.Upload(testing::ToBf16(w));
    db.Upload(testing::ToBf16(b));
    dout.Poison();
    LayerNormParams p;
    p.x = Bf(dx);
    p.x_stride = dim;
    p.weight = Bf(dw);
    p.bias = Bf(db);
    p.out = Bf(dout);
    p.out_stride = dim;
    p.rows = rows;
    p.dim = dim;
    p.eps = 1e-6f;
    ASSERT_TRUE(LaunchLayerNorm(p, nullptr).ok());
    SPAR_ASSERT_CUDA(cudaGetLastError());
    SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
    std::vector<float> want(rows * dim);
    ref::LayerNorm(x.data(), dim, rows, dim, w.data(), b.data(), 1e-6f, want.data(), dim);
    // Outputs near zero (x ≈ mean, b ≈ 0) make a relative bound meaningless:
    // add an absolute term of one bf16 step at the output scale.
    const auto got = testing::FromBf16(dout.Download());
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (!(std::fabs(got[i] - want[i]) <= std::fabs(want[i]) / 128.0f + 2e-3f)) ++bad;
    }
    EXPECT_EQ(bad, 0);
    EXPECT_LT(testing::RelativeL2(got, want), 4e-3);
  }
}

// RoPE: both pair layouts, plain and YaRN tables, in place on a column
// range of [tokens, heads, 256] rows and out of place into a 576-wide buffer.
TEST(RopeApply, MatchesReference) {
  SPAR_REQUIRE_GPU();
  for (bool yarn : {false, true}) {
    for (bool interleaved : {true, false}) {
      for (bool in_place : {true, false}) {
        SCOPED_TRACE(::testing::Message() << "yarn " << yarn << " interleaved " << interleaved << " in_place " << in_place);
        const int tokens = 19, heads = 12, dim = 256, off = 192, out_dim = 576, out_off = 512;
        const int64_t rows = static_cast<int64_t>(tokens) * heads;
        ref::RopeParams rp;
        rp.rotary_dim = 64;
        rp.theta = yarn ? 10000.0 : 1e6;
        rp.yarn = yarn;
        rp.yarn_factor = 40;
        const auto inv = ref::RopeInvFreq(rp);
        auto x = RandomBf16(rows * dim, 21, -2.0f, 2.0f);
        Rng rng(22);
        std::vector<int32_t> pos(tokens);
        for (auto& v : pos) v = static_cast<int32_t>(rng.Below(1 << 20));
        pos[0] = 0;
        DeviceArray<uint16_t> dx, dout(rows * out_dim);
        dx.Upload(testing::ToBf16(x));
        dout.Poison();
        DeviceArray<int32_t> dpos;
        dpos.Upload(pos);
        DeviceArray<float> dinv;
        dinv.Upload(inv);
        RopeApplyParams p;
        p.in = Bf(dx);
        p.in_stride = dim;
        p.in_offset = off;
        p.out = in_place ? Bf(dx) : Bf(dout);
        p.out_stride = in_place ? dim : out_dim;
        p.out_offset = in_place ? off : out_off;
        p.rows = rows;
        p.rows_per_position = heads;
        p.positions = dpos.get();
        p.rotary_dim = 64;
        p.inv_freq = dinv.get();
        p.interleaved = interleaved;
        ASSERT_TRUE(LaunchRopeApply(p, nullptr).ok());
        SPAR_ASSERT_CUDA(cudaGetLastError());
        SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
        std::vector<float> want = x;
        ref::ApplyRope(want.data(), dim, rows, heads, pos.data(), off,
                       interleaved ? ref::RopePairs::kInterleaved : ref::RopePairs::kHalfSplit, rp);
        const auto got_all = testing::FromBf16(in_place ? dx.Download() : dout.Download());
        // Same float math as the reference: bf16 results must be identical.
        int bad = 0, untouched_bad = 0;
        for (int64_t r = 0; r < rows; ++r) {
          for (int i = 0; i < 64; ++i) {
            const float g = got_all[r * p.out_stride + p.out_offset + i];
            const float w = RoundToBf16(want[r * dim + off + i]);
            if (g != w) {
              if (bad < 5) ADD_FAILURE() << "row " << r << " dim " << i << ": " << g << " vs " << w;
              ++bad;
            }
          }
          if (in_place) {
            for (int i = 0; i < off; ++i) untouched_bad += got_all[r * dim + i] != x[r * dim + i];
          }
        }
        EXPECT_EQ(bad, 0);
        EXPECT_EQ(untouched_bad, 0);
      }
    }
  }
}

TEST(Embedding, GathersRows) {
  SPAR_REQUIRE_GPU();
  const int vocab = 1000, dim = 6144, tokens = 33;
  const auto table = RandomBf16(static_cast<size_t>(vocab) * dim, 31, -1.0f, 1.0f);
  Rng rng(32);
  std::vector<int32_t> ids(tokens);
  for (auto& v : ids) v = static_cast<int32_t>(rng.Below(vocab));
  ids[3] = -1;
  ids[4] = vocab;  // out of range: zero rows
  DeviceArray<uint16_t> dt, dout(static_cast<size_t>(tokens) * dim);
  dt.Upload(testing::ToBf16(table));
  dout.Poison();
  DeviceArray<int32_t> did;
  did.Upload(ids);
  EmbeddingParams p;
  p.ids = did.get();
  p.tokens = tokens;
  p.table = Bf(dt);
  p.vocab = vocab;
  p.dim = dim;
  p.out = Bf(dout);
  p.out_stride = dim;
  ASSERT_TRUE(LaunchEmbedding(p, nullptr).ok());
  SPAR_ASSERT_CUDA(cudaGetLastError());
  SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
  const auto got = testing::FromBf16(dout.Download());
  int bad = 0;
  for (int t = 0; t < tokens; ++t) {
    for (int i = 0; i < dim; ++i) {
      const float want = (ids[t] < 0 || ids[t] >= vocab) ? 0.0f : table[static_cast<size_t>(ids[t]) * dim + i];
      bad += got[static_cast<size_t>(t) * dim + i] != want;
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(SiluMul, MatchesReference) {
  SPAR_REQUIRE_GPU();
  const int64_t rows = 29;
  const int dim = 2048;
  const auto gu = RandomBf16(rows * 2 * dim, 41, -6.0f, 6.0f);  // fused [gate | up] rows
  DeviceArray<uint16_t> din, dout(rows * dim);
  din.Upload(testing::ToBf16(gu));
  dout.Poison();
  SiluMulParams p;
  p.gate = Bf(din);
  p.up = Bf(din) + dim;
  p.in_stride = 2 * dim;
  p.out = Bf(dout);
  p.out_stride = dim;
  p.rows = rows;
  p.dim = dim;
  ASSERT_TRUE(LaunchSiluMul(p, nullptr).ok());
  SPAR_ASSERT_CUDA(cudaGetLastError());
  SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
  std::vector<float> want(rows * dim);
  ref::SiluMul(gu.data(), gu.data() + dim, 2 * dim, rows, dim, want.data(), dim);
  ExpectBf16Close(testing::FromBf16(dout.Download()), want, "silu_mul");
}

// RoPE of heads that fill only the first columns of each token's row (q_b's
// rows beside the indexer's query, one GEMM's output): in_position_stride
// steps between tokens; the result equals the packed rows' and the wider
// row's other columns are not read into it.
TEST(RopeApply, PositionStrideReadsTheHeadsOfWiderRows) {
  SPAR_REQUIRE_GPU();
  const int tokens = 7, heads = 5, dim = 256, off = 192, extra = 384, out_dim = 576, out_off = 512;
  const int64_t row = static_cast<int64_t>(heads) * dim + extra;
  const int64_t rows = static_cast<int64_t>(tokens) * heads;
  ref::RopeParams rp;
  rp.rotary_dim = 64;
  rp.theta = 1e4;
  const auto inv = ref::RopeInvFreq(rp);
  auto wide = RandomBf16(tokens * row, 31, -2.0f, 2.0f);
  Rng rng(32);
  std::vector<int32_t> pos(tokens);
  for (auto& v : pos) v = static_cast<int32_t>(rng.Below(1 << 17));
  DeviceArray<uint16_t> dx, dout(rows * out_dim);
  dx.Upload(testing::ToBf16(wide));
  dout.Poison();
  DeviceArray<int32_t> dpos;
  dpos.Upload(pos);
  DeviceArray<float> dinv;
  dinv.Upload(inv);
  RopeApplyParams p;
  p.in = Bf(dx);
  p.in_stride = dim;
  p.in_position_stride = row;
  p.in_offset = off;
  p.out = Bf(dout);
  p.out_stride = out_dim;
  p.out_offset = out_off;
  p.rows = rows;
  p.rows_per_position = heads;
  p.positions = dpos.get();
  p.rotary_dim = 64;
  p.inv_freq = dinv.get();
  ASSERT_TRUE(LaunchRopeApply(p, nullptr).ok());
  SPAR_ASSERT_CUDA(cudaGetLastError());
  SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
  std::vector<float> packed(rows * dim);
  for (int t = 0; t < tokens; ++t) {
    std::copy(wide.begin() + t * row, wide.begin() + t * row + heads * dim, packed.begin() + t * heads * dim);
  }
  ref::ApplyRope(packed.data(), dim, rows, heads, pos.data(), off, ref::RopePairs::kInterleaved, rp);
  const auto got = testing::FromBf16(dout.Download());
  int bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int i = 0; i < 64; ++i) {
      const float g = got[r * out_dim + out_off + i], w = RoundToBf16(packed[r * dim + off + i]);
      if (g != w && bad++ < 5) ADD_FAILURE() << "row " << r << " dim " << i << ": " << g << " vs " << w;
    }
  }
  EXPECT_EQ(bad, 0);
  p.in_position_stride = -1;
  EXPECT_EQ(LaunchRopeApply(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

TEST(SmallOps, RejectBadParams) {
  RmsNormParams r;
  r.rows = 1;
  r.dim = 100;  // not a multiple of 8
  EXPECT_EQ(LaunchRmsNorm(r, nullptr).code(), absl::StatusCode::kInvalidArgument);
  RopeApplyParams q;
  q.rows = 1;
  q.rotary_dim = 63;
  EXPECT_EQ(LaunchRopeApply(q, nullptr).code(), absl::StatusCode::kInvalidArgument);
  SiluMulParams s;
  s.rows = 1;
  s.dim = 8;
  EXPECT_EQ(LaunchSiluMul(s, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace spar
