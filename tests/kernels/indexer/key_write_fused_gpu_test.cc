// The q_a RMSNorm fused with the indexer key write
// (LaunchRmsNormAndIndexerKeyWrite) against the two launches it replaces:
// the same bits in the norm's output and in every cache page, for both key
// formats, step sizes from one token to a prefill chunk and padding tokens.
#include <cstdint>
#include <vector>

#include "kernels/cuda/indexer/indexer.h"
#include "kernels/cuda/small_ops/small_ops.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/kernels/indexer/indexer_test_util.h"

namespace spar {
namespace {

using testing::DeviceArray;

// The fused A projection's row as GLM-5 lays it out: q_a (2048), the latent
// (576), the indexer key (128), the indexer head weights (32).
constexpr int kQRank = 2048, kKeyCol = 2048 + 576, kStride = 2784;
constexpr int kPages = 9, kRopeRows = 9000;

struct FusedCase {
  IndexerFormat format;
  int tokens;
};

class RmsNormAndKeyWriteTest : public ::testing::TestWithParam<FusedCase> {};

TEST_P(RmsNormAndKeyWriteTest, EqualsTheTwoLaunches) {
  SPAR_REQUIRE_GPU();
  const FusedCase c = GetParam();
  const int tokens = c.tokens;
  Rng rng(31 + tokens + 7 * static_cast<int>(c.format));
  std::vector<float> a(static_cast<size_t>(tokens) * kStride);
  for (auto& v : a) v = 2.0f * rng.Symmetric();
  std::vector<float> norm_w(kQRank), key_w(128), key_b(128);
  for (auto& v : norm_w) v = 0.5f + rng.Uniform();
  for (auto& v : key_w) v = 0.5f + rng.Uniform();
  for (auto& v : key_b) v = 0.3f * rng.Symmetric();
  std::vector<int32_t> positions(tokens), slots(tokens), perm(kPages * 64);
  for (int i = 0; i < kPages * 64; ++i) perm[i] = i;
  for (int i = kPages * 64 - 1; i > 0; --i) std::swap(perm[i], perm[rng.Below(i + 1)]);
  for (int t = 0; t < tokens; ++t) {
    positions[t] = static_cast<int32_t>(rng.Below(kRopeRows));
    slots[t] = (tokens > 1 && t % 11 == 3) ? -1 : perm[t % (kPages * 64)];  // a few padding tokens
  }
  std::vector<float> cos_t, sin_t;
  testing::RopeTables(testing::IndexerRopeParams(false), kRopeRows, &cos_t, &sin_t);

  DeviceArray<uint16_t> d_a, d_norm_w;
  d_a.Upload(testing::ToBf16(a));
  d_norm_w.Upload(testing::ToBf16(norm_w));
  DeviceArray<float> d_kw, d_kb, d_cos, d_sin;
  d_kw.Upload(key_w);
  d_kb.Upload(key_b);
  d_cos.Upload(cos_t);
  d_sin.Upload(sin_t);
  DeviceArray<int32_t> d_pos, d_slots;
  d_pos.Upload(positions);
  d_slots.Upload(slots);
  const size_t page_bytes = IndexerPageBytes(c.format);
  DeviceArray<uint16_t> out_apart(static_cast<size_t>(tokens) * kQRank), out_fused(static_cast<size_t>(tokens) * kQRank);
  DeviceArray<uint8_t> cache_apart(kPages * page_bytes), cache_fused(kPages * page_bytes);
  out_apart.Poison();
  out_fused.Poison();
  cache_apart.Poison();
  cache_fused.Poison();

  auto norm_params = [&](DeviceArray<uint16_t>& out) {
    RmsNormParams p;
    p.x = testing::AsBf16(d_a.get());
    p.x_stride = kStride;
    p.weight = testing::AsBf16(d_norm_w.get());
    p.out = testing::AsBf16(out.get());
    p.out_stride = kQRank;
    p.rows = tokens;
    p.dim = kQRank;
    p.eps = 1e-6f;
    return p;
  };
  auto key_params = [&](DeviceArray<uint8_t>& cache) {
    IndexerKeyWriteParams p;
    p.tokens = tokens;
    p.x = testing::AsBf16(d_a.get()) + kKeyCol;
    p.x_stride = kStride;
    p.norm_weight = d_kw.get();
    p.norm_bias = d_kb.get();
    p.positions = d_pos.get();
    p.rope = {d_cos.get(), d_sin.get(), kRopeRows, ref::RopePairs::kInterleaved};
    p.slots = d_slots.get();
    p.format = c.format;
    p.cache = cache.get();
    return p;
  };
  ASSERT_TRUE(LaunchRmsNorm(norm_params(out_apart), nullptr).ok());
  ASSERT_TRUE(LaunchIndexerKeyWrite(key_params(cache_apart), nullptr).ok());
  const absl::Status fused = LaunchRmsNormAndIndexerKeyWrite(norm_params(out_fused), key_params(cache_fused), nullptr);
  ASSERT_TRUE(fused.ok()) << fused;
  SPAR_ASSERT_CUDA(cudaGetLastError());
  SPAR_ASSERT_CUDA(cudaDeviceSynchronize());

  const auto want_out = out_apart.Download(), got_out = out_fused.Download();
  for (size_t i = 0; i < want_out.size(); ++i) {
    ASSERT_NE(want_out[i], 0xFFFF) << "the norm left value " << i << " unwritten";
    ASSERT_EQ(got_out[i], want_out[i]) << "norm output " << i << " (token " << i / kQRank << ")";
  }
  const auto want_cache = cache_apart.Download(), got_cache = cache_fused.Download();
  int written = 0;
  for (size_t i = 0; i < want_cache.size(); ++i) {
    written += want_cache[i] != 0xFF;
    ASSERT_EQ(got_cache[i], want_cache[i]) << "cache byte " << i << " (page " << i / page_bytes << ")";
  }
  EXPECT_GT(written, 0) << "no key was written: the comparison proves nothing";
}

INSTANTIATE_TEST_SUITE_P(Steps, RmsNormAndKeyWriteTest,
                         ::testing::Values(FusedCase{IndexerFormat::kFp8, 1}, FusedCase{IndexerFormat::kFp8, 9},
                                           FusedCase{IndexerFormat::kFp8, 300}, FusedCase{IndexerFormat::kBF16, 1},
                                           FusedCase{IndexerFormat::kBF16, 67}));

// Refused before anything touches the pointers: runs without a GPU.
TEST(RmsNormAndKeyWrite, RefusesAResidualAndBadKeyParams) {
  RmsNormParams norm;
  norm.rows = 1;
  norm.dim = 2048;
  std::vector<uint16_t> host(2048);
  norm.residual = testing::AsBf16(host.data());
  IndexerKeyWriteParams key;
  absl::Status s = LaunchRmsNormAndIndexerKeyWrite(norm, key, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("norm.residual"), absl::string_view::npos) << s;
  norm.residual = nullptr;
  norm.rows = 0;
  key.tokens = 2;  // and no key input
  s = LaunchRmsNormAndIndexerKeyWrite(norm, key, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("x"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace spar
