// q absorption and output un-absorption GEMMs against ref::Gemm per head,
// at GLM-5 (Dn 192, Dv 256) and DeepSeek-V3.2 (Dn 128, Dv 128) head shapes.
#include "kernels/cuda/attention/absorb_gemm.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/numeric.h"
#include "gtest/gtest.h"
#include "kernels/ref/gemm_ref.h"
#include "tests/kernels/gpu_test_util.h"

namespace spar {
namespace {

using testing::DeviceArray;

std::vector<float> RandomBf16(size_t n, uint64_t seed, float lo, float hi) {
  std::vector<float> v = testing::RandomFloats(n, seed, lo, hi);
  for (auto& x : v) x = RoundToBf16(x);
  return v;
}

struct Shape {
  int heads, nope, v;
};

class AbsorbGemm : public ::testing::TestWithParam<Shape> {};

TEST_P(AbsorbGemm, QAbsorbAndUnabsorbMatchReference) {
  SPAR_REQUIRE_GPU();
  const Shape s = GetParam();
  const int qdim = s.nope + 64;
  // kv_b dequantized: [heads, nope + v, 512].
  const auto kvb = RandomBf16(static_cast<size_t>(s.heads) * (s.nope + s.v) * 512, 1, -0.1f, 0.1f);
  DeviceArray<uint16_t> dkvb;
  dkvb.Upload(testing::ToBf16(kvb));
  MlaAbsorbWeights w{reinterpret_cast<const __nv_bfloat16*>(dkvb.get()), s.heads, s.nope, s.v};
  // Up to 16 tokens take the 16-row tile, 17-255 the 64-row tile, more the
  // 128-row tile (300: two whole tiles and a partial one).
  for (int64_t tokens : {1, 2, 7, 16, 17, 130, 300}) {
    SCOPED_TRACE(::testing::Message() << "heads " << s.heads << " nope " << s.nope << " tokens " << tokens);
    // q absorption into the 576-wide attention query buffer.
    const auto q = RandomBf16(tokens * s.heads * qdim, 2 + tokens, -2.0f, 2.0f);
    DeviceArray<uint16_t> dq, dqo(tokens * s.heads * 576);
    dq.Upload(testing::ToBf16(q));
    dqo.Poison();
    absl::Status st = LaunchMlaQAbsorb(w, reinterpret_cast<const __nv_bfloat16*>(dq.get()), tokens, qdim,
                                       reinterpret_cast<__nv_bfloat16*>(dqo.get()), static_cast<int64_t>(s.heads) * 576,
                                       576, nullptr);
    ASSERT_TRUE(st.ok()) << st;
    SPAR_ASSERT_CUDA(cudaGetLastError());
    SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
    const auto got_q = testing::FromBf16(dqo.Download());
    std::vector<float> got, want;
    for (int h = 0; h < s.heads; ++h) {
      // W_UK[h]ᵀ as [512, nope] for ref::Gemm (y = x · wᵀ).
      std::vector<float> wt(512 * s.nope), y(tokens * 512);
      for (int d = 0; d < s.nope; ++d)
        for (int c = 0; c < 512; ++c) wt[c * s.nope + d] = kvb[(static_cast<size_t>(h) * (s.nope + s.v) + d) * 512 + c];
      ref::Gemm(q.data() + h * qdim, static_cast<int64_t>(s.heads) * qdim, tokens, s.nope, wt.data(), 512, y.data(), 512);
      for (int64_t t = 0; t < tokens; ++t) {
        for (int c = 0; c < 512; ++c) {
          got.push_back(got_q[(t * s.heads + h) * 576 + c]);
          want.push_back(y[t * 512 + c]);
        }
      }
    }
    EXPECT_LT(testing::RelativeL2(got, want), 5e-3) << "q absorption";
    for (int64_t t = 0; t < tokens; ++t) {  // the rope lanes are not touched
      for (int h = 0; h < s.heads; ++h) {
        EXPECT_TRUE(std::isnan(got_q[(t * s.heads + h) * 576 + 520])) << "wrote past 512";
      }
    }

    // Un-absorption from a strided o_latent (the attention output buffer).
    const auto ol = RandomBf16(tokens * s.heads * 512, 3 + tokens, -1.0f, 1.0f);
    DeviceArray<uint16_t> dol, dout(tokens * s.heads * s.v);
    dol.Upload(testing::ToBf16(ol));
    dout.Poison();
    st = LaunchMlaOutUnabsorb(w, reinterpret_cast<const __nv_bfloat16*>(dol.get()), tokens,
                              static_cast<int64_t>(s.heads) * 512, 512, reinterpret_cast<__nv_bfloat16*>(dout.get()),
                              nullptr);
    ASSERT_TRUE(st.ok()) << st;
    SPAR_ASSERT_CUDA(cudaGetLastError());
    SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
    const auto got_o = testing::FromBf16(dout.Download());
    got.clear();
    want.clear();
    for (int h = 0; h < s.heads; ++h) {
      std::vector<float> y(tokens * s.v);
      ref::Gemm(ol.data() + h * 512, static_cast<int64_t>(s.heads) * 512, tokens, 512,
                kvb.data() + (static_cast<size_t>(h) * (s.nope + s.v) + s.nope) * 512, s.v, y.data(), s.v);
      for (int64_t t = 0; t < tokens; ++t) {
        for (int c = 0; c < s.v; ++c) {
          got.push_back(got_o[(t * s.heads + h) * s.v + c]);
          want.push_back(y[t * s.v + c]);
        }
      }
    }
    EXPECT_LT(testing::RelativeL2(got, want), 5e-3) << "un-absorption";
  }
}

// A token's row has the same bits whichever tile shape its step took
// (absorb_gemm.cu): the rows of a 1- / 5- / 16-token call (16-row tiles)
// and of a 40- / 130-token call (64-row tiles) equal the same rows of a
// 300-token call (128-row tiles). A speculative verify step's rows then
// equal a plain decode step's, and a prefill chunk's a decode step's.
TEST_P(AbsorbGemm, ARowHasTheSameBitsInEitherTileShape) {
  SPAR_REQUIRE_GPU();
  const Shape s = GetParam();
  const int qdim = s.nope + 64;
  const auto kvb = RandomBf16(static_cast<size_t>(s.heads) * (s.nope + s.v) * 512, 11, -0.1f, 0.1f);
  DeviceArray<uint16_t> dkvb;
  dkvb.Upload(testing::ToBf16(kvb));
  MlaAbsorbWeights w{reinterpret_cast<const __nv_bfloat16*>(dkvb.get()), s.heads, s.nope, s.v};
  const int64_t most = 300;
  DeviceArray<uint16_t> dq, dol;
  dq.Upload(testing::ToBf16(RandomBf16(most * s.heads * qdim, 12, -2.0f, 2.0f)));
  dol.Upload(testing::ToBf16(RandomBf16(most * s.heads * 512, 13, -1.0f, 1.0f)));
  auto run = [&](int64_t tokens, std::vector<uint16_t>* q_out, std::vector<uint16_t>* o_out) {
    DeviceArray<uint16_t> dqo(tokens * s.heads * 576), dout(tokens * s.heads * s.v);
    dqo.Poison();
    dout.Poison();
    ASSERT_TRUE(LaunchMlaQAbsorb(w, reinterpret_cast<const __nv_bfloat16*>(dq.get()), tokens, qdim,
                                 reinterpret_cast<__nv_bfloat16*>(dqo.get()), static_cast<int64_t>(s.heads) * 576, 576,
                                 nullptr)
                    .ok());
    ASSERT_TRUE(LaunchMlaOutUnabsorb(w, reinterpret_cast<const __nv_bfloat16*>(dol.get()), tokens,
                                     static_cast<int64_t>(s.heads) * 512, 512,
                                     reinterpret_cast<__nv_bfloat16*>(dout.get()), nullptr)
                    .ok());
    SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
    *q_out = dqo.Download();
    *o_out = dout.Download();
  };
  std::vector<uint16_t> tall_q, tall_o;
  run(most, &tall_q, &tall_o);
  for (int64_t tokens : {1, 5, 16, 40, 130}) {
    SCOPED_TRACE(::testing::Message() << "tokens " << tokens);
    std::vector<uint16_t> q, o;
    run(tokens, &q, &o);
    for (int64_t i = 0; i < tokens * s.heads; ++i) {  // the 512 latent lanes of each (token, head)
      ASSERT_TRUE(std::equal(q.begin() + i * 576, q.begin() + i * 576 + 512, tall_q.begin() + i * 576))
          << "q absorption, (token, head) " << i;
    }
    EXPECT_TRUE(std::equal(o.begin(), o.end(), tall_o.begin())) << "un-absorption";
  }
}

INSTANTIATE_TEST_SUITE_P(Models, AbsorbGemm, ::testing::Values(Shape{8, 192, 256}, Shape{16, 128, 128}, Shape{64, 192, 256}));

TEST(AbsorbGemmParams, RejectsBadShapes) {
  BatchedGemmParams p;
  p.m = 1;
  p.n = 100;
  p.k = 32;
  EXPECT_EQ(LaunchBatchedGemm(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

// Refused before the kernel could read anything (host pointers): runs
// without a GPU.
TEST(AbsorbGemmParams, RejectsATileHeightItDoesNotHave) {
  std::vector<uint16_t> buf(64 * 64);
  BatchedGemmParams p;
  p.a = p.b = reinterpret_cast<const __nv_bfloat16*>(buf.data());
  p.c = reinterpret_cast<__nv_bfloat16*>(buf.data());
  p.lda = p.ldb = p.ldc = 64;
  p.m = 1;
  p.n = 64;
  p.k = 32;
  p.tile_rows = 32;
  const absl::Status st = LaunchBatchedGemm(p, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("tile_rows"), std::string::npos) << st;
}

}  // namespace
}  // namespace spar
