// Indexer key write, query prep and gather against kernels/ref.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cuda/indexer/indexer.h"
#include "kernels/ref/cache_ref.h"
#include "kernels/ref/norm_ref.h"
#include "kernels/ref/rope_ref.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/kernels/indexer/indexer_test_util.h"

namespace spar {
namespace {

using testing::DeviceArray;

struct KeyCase {
  IndexerFormat format;
  bool deepseek;  // half-split + YaRN (else GLM-5 interleaved)
  bool hadamard;
};

class IndexerKeyWriteTest : public ::testing::TestWithParam<KeyCase> {};

// Adjacent e4m3 codes (same sign) differ by one in their low 7 bits.
int CodeDistance(uint8_t a, uint8_t b) {
  if (a == b) return 0;
  if ((a ^ b) & 0x80) return ((a & 0x7f) == 0 && (b & 0x7f) == 0) ? 0 : 1000;
  return std::abs(static_cast<int>(a & 0x7f) - static_cast<int>(b & 0x7f));
}

TEST_P(IndexerKeyWriteTest, MatchesReference) {
  SPAR_REQUIRE_GPU();
  const KeyCase c = GetParam();
  const int tokens = 301, num_pages = 7, stride = 160;
  const size_t page_bytes = IndexerPageBytes(c.format);
  Rng rng(17 + static_cast<int>(c.format) * 5 + c.deepseek * 2 + c.hadamard);

  // Inputs: x (bf16, with a per-dim offset so LayerNorm matters), norm params, positions, slots.
  std::vector<float> x(tokens * stride);
  for (int t = 0; t < tokens; ++t)
    for (int d = 0; d < stride; ++d) x[t * stride + d] = 3.0f * rng.Symmetric() + 0.02f * (d - 64);
  const std::vector<uint16_t> x_bf = testing::ToBf16(x);
  x = testing::FromBf16(x_bf);
  std::vector<float> nw(128), nb(128);
  for (int d = 0; d < 128; ++d) {
    nw[d] = 0.5f + rng.Uniform();
    nb[d] = 0.3f * rng.Symmetric();
  }
  std::vector<int32_t> positions(tokens), slots(tokens);
  std::vector<int32_t> perm(num_pages * 64);
  for (int i = 0; i < num_pages * 64; ++i) perm[i] = i;
  for (int i = num_pages * 64 - 1; i > 0; --i) std::swap(perm[i], perm[rng.Below(i + 1)]);
  for (int t = 0; t < tokens; ++t) {
    positions[t] = static_cast<int32_t>(rng.Below(9000));
    slots[t] = (t % 13 == 5) ? -1 : perm[t];  // some padding tokens
  }
  const ref::RopeParams rp = testing::IndexerRopeParams(c.deepseek);
  std::vector<float> cos_t, sin_t;
  testing::RopeTables(rp, 9000, &cos_t, &sin_t);

  // Reference: LayerNorm -> RoPE -> [Hadamard] -> EncodeIndexerKey.
  std::vector<float> k(tokens * 128);
  ref::LayerNorm(x.data(), stride, tokens, 128, nw.data(), nb.data(), 1e-6f, k.data(), 128);
  ref::ApplyRope(k.data(), 128, tokens, 1, positions.data(), 0,
                 c.deepseek ? ref::RopePairs::kHalfSplit : ref::RopePairs::kInterleaved, rp);
  std::vector<uint8_t> want(num_pages * page_bytes, 0xFF);
  for (int t = 0; t < tokens; ++t) {
    if (slots[t] < 0) continue;
    if (c.hadamard) testing::HadamardRef(k.data() + t * 128);
    ref::EncodeIndexerKey(c.format, k.data() + t * 128, want.data() + (slots[t] / 64) * page_bytes, slots[t] % 64);
  }

  DeviceArray<uint16_t> d_x;
  d_x.Upload(x_bf);
  DeviceArray<float> d_nw, d_nb, d_cos, d_sin;
  d_nw.Upload(nw);
  d_nb.Upload(nb);
  d_cos.Upload(cos_t);
  d_sin.Upload(sin_t);
  DeviceArray<int32_t> d_pos, d_slots;
  d_pos.Upload(positions);
  d_slots.Upload(slots);
  DeviceArray<uint8_t> d_cache(num_pages * page_bytes);
  d_cache.Poison();

  IndexerKeyWriteParams p;
  p.tokens = tokens;
  p.x = testing::AsBf16(d_x.get());
  p.x_stride = stride;
  p.norm_weight = d_nw.get();
  p.norm_bias = d_nb.get();
  p.positions = d_pos.get();
  p.rope = {d_cos.get(), d_sin.get(), 9000, c.deepseek ? ref::RopePairs::kHalfSplit : ref::RopePairs::kInterleaved};
  p.hadamard = c.hadamard;
  p.slots = d_slots.get();
  p.format = c.format;
  p.cache = d_cache.get();
  ASSERT_TRUE(IndexerKeyWriteSupported(p));
  ASSERT_TRUE(LaunchIndexerKeyWrite(p, nullptr).ok());
  SPAR_ASSERT_CUDA(cudaGetLastError());
  SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
  const std::vector<uint8_t> got = d_cache.Download();

  // Unwritten slots keep the poison; written ones match to one code / one
  // bf16 ulp (LayerNorm's fp32 sum order differs from the ref's double).
  int values = 0, inexact = 0, far = 0;
  for (int slot = 0; slot < num_pages * 64; ++slot) {
    const int page = slot / 64, off = slot % 64;
    const uint8_t* g = got.data() + page * page_bytes;
    const uint8_t* w = want.data() + page * page_bytes;
    if (c.format == IndexerFormat::kFp8) {
      for (int d = 0; d < 128; ++d) {
        const uint8_t a = g[off * 128 + d], b = w[off * 128 + d];
        ++values;
        const int dist = CodeDistance(a, b);
        inexact += dist != 0;
        far += dist > 1;
      }
      float sa, sb;
      std::memcpy(&sa, g + 64 * 128 + 4 * off, 4);
      std::memcpy(&sb, w + 64 * 128 + 4 * off, 4);
      if (std::isnan(sb)) {
        EXPECT_TRUE(std::isnan(sa)) << "slot " << slot << " should be untouched";
      } else {
        EXPECT_NEAR(sa, sb, 1e-5 * sb) << "scale of slot " << slot;
      }
    } else {
      // Near-zero values (RoPE cancellation) may differ by more than one ulp;
      // allow an absolute 1e-5 of the key's largest magnitude there.
      float amax = 0;
      for (int d = 0; d < 128; ++d) {
        uint16_t b;
        std::memcpy(&b, w + (off * 128 + d) * 2, 2);
        amax = std::max(amax, std::fabs(Bf16ToFloat(b)));
      }
      for (int d = 0; d < 128; ++d) {
        uint16_t a, b;
        std::memcpy(&a, g + (off * 128 + d) * 2, 2);
        std::memcpy(&b, w + (off * 128 + d) * 2, 2);
        ++values;
        inexact += a != b;
        const bool adjacent = std::abs(static_cast<int>(a) - static_cast<int>(b)) <= 1;
        far += !adjacent && !(std::fabs(Bf16ToFloat(a) - Bf16ToFloat(b)) <= 1e-5f * amax);
      }
    }
  }
  EXPECT_EQ(far, 0);
  EXPECT_LE(inexact, values / 100) << "of " << values;
}

INSTANTIATE_TEST_SUITE_P(Cases, IndexerKeyWriteTest,
                         ::testing::Values(KeyCase{IndexerFormat::kFp8, false, false},
                                           KeyCase{IndexerFormat::kFp8, true, false},
                                           KeyCase{IndexerFormat::kFp8, false, true},
                                           KeyCase{IndexerFormat::kBF16, false, false},
                                           KeyCase{IndexerFormat::kBF16, true, true}));

TEST(IndexerKeyWrite, RejectsBadParams) {
  IndexerKeyWriteParams p;
  p.tokens = 4;
  const absl::Status s = LaunchIndexerKeyWrite(p, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("x"), absl::string_view::npos);
  p.format = IndexerFormat::kF32;
  EXPECT_FALSE(IndexerKeyWriteSupported(p));
}

// --- query prep ---------------------------------------------------------------

class IndexerQueryPrepTest : public ::testing::TestWithParam<std::tuple<bool, bool, bool>> {};

TEST_P(IndexerQueryPrepTest, MatchesReference) {
  SPAR_REQUIRE_GPU();
  const auto [deepseek, hadamard, w_bf16] = GetParam();
  const int tokens = 37, heads = deepseek ? 64 : 32, stride = heads * 128 + 64;
  const std::vector<float> q0 = testing::RandomFloats(tokens * stride, 91 + deepseek + 2 * hadamard, -2.0f, 2.0f);
  const std::vector<uint16_t> q_bf = testing::ToBf16(q0);
  const std::vector<float> w_in = testing::RandomFloats(tokens * (heads + 3), 93);
  const std::vector<uint16_t> w_in_bf = testing::ToBf16(w_in);
  std::vector<int32_t> positions(tokens);
  for (int t = 0; t < tokens; ++t) positions[t] = 7 * t * t + 3;
  const ref::RopeParams rp = testing::IndexerRopeParams(deepseek);
  std::vector<float> cos_t, sin_t;
  testing::RopeTables(rp, 12000, &cos_t, &sin_t);
  const float weight_scale = 1.0f / std::sqrt(static_cast<float>(heads) * 128.0f);

  // Reference.
  std::vector<float> q(tokens * heads * 128);
  for (int t = 0; t < tokens; ++t)
    for (int i = 0; i < heads * 128; ++i) q[t * heads * 128 + i] = Bf16ToFloat(q_bf[t * stride + i]);
  ref::ApplyRope(q.data(), 128, tokens * heads, heads, positions.data(), 0,
                 deepseek ? ref::RopePairs::kHalfSplit : ref::RopePairs::kInterleaved, rp);
  if (hadamard)
    for (int r = 0; r < tokens * heads; ++r) testing::HadamardRef(q.data() + r * 128);

  DeviceArray<uint16_t> d_q, d_wbf;
  d_q.Upload(q_bf);
  d_wbf.Upload(w_in_bf);
  DeviceArray<float> d_w, d_cos, d_sin, d_wout(tokens * heads);
  d_w.Upload(w_in);
  d_cos.Upload(cos_t);
  d_sin.Upload(sin_t);
  DeviceArray<int32_t> d_pos;
  d_pos.Upload(positions);
  DeviceArray<uint16_t> d_qout(tokens * heads * 128);
  d_qout.Poison();
  d_wout.Poison();

  IndexerQueryPrepParams p;
  p.tokens = tokens;
  p.heads = heads;
  p.q = testing::AsBf16(d_q.get());
  p.q_stride = stride;
  p.q_out = testing::AsBf16(d_qout.get());
  p.q_out_stride = heads * 128;
  p.positions = d_pos.get();
  p.rope = {d_cos.get(), d_sin.get(), 12000, deepseek ? ref::RopePairs::kHalfSplit : ref::RopePairs::kInterleaved};
  p.hadamard = hadamard;
  if (w_bf16) {
    p.w_in_bf16 = testing::AsBf16(d_wbf.get());
  } else {
    p.w_in_f32 = d_w.get();
  }
  p.w_in_stride = heads + 3;
  p.weight_scale = weight_scale;
  p.w_out = d_wout.get();
  ASSERT_TRUE(LaunchIndexerQueryPrep(p, nullptr).ok());
  SPAR_ASSERT_CUDA(cudaGetLastError());
  SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
  const std::vector<float> got = testing::FromBf16(d_qout.Download());
  const std::vector<float> w_got = d_wout.Download();

  int inexact = 0;
  for (size_t i = 0; i < q.size(); ++i) {
    const float want = RoundToBf16(q[i]);
    ASSERT_TRUE(std::isfinite(got[i])) << i;
    if (got[i] != want) {
      ++inexact;
      EXPECT_NEAR(got[i], want, std::fabs(want) * (1.0f / 64) + 1e-6f) << i;
    }
  }
  EXPECT_LE(inexact, static_cast<int>(q.size() / 100));
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < heads; ++h) {
      const float w = w_bf16 ? Bf16ToFloat(w_in_bf[t * (heads + 3) + h]) : w_in[t * (heads + 3) + h];
      EXPECT_EQ(w_got[t * heads + h], w * weight_scale);
    }
}

INSTANTIATE_TEST_SUITE_P(Cases, IndexerQueryPrepTest,
                         ::testing::Values(std::make_tuple(false, false, false), std::make_tuple(true, false, true),
                                           std::make_tuple(false, true, true), std::make_tuple(true, true, false)));

// --- gather -------------------------------------------------------------------

TEST(IndexerGather, CopiesPagesToContiguousRows) {
  SPAR_REQUIRE_GPU();
  for (IndexerFormat format : {IndexerFormat::kFp8, IndexerFormat::kBF16}) {
    const std::vector<int> lens = {1, 64, 130, 2049};
    testing::PagedCache cache = testing::BuildPagedCache(format, lens, 5);
    const int nseq = static_cast<int>(lens.size());
    const int max_len = 2049, tstride = (max_len + 63) / 64 + 1;
    std::vector<int32_t> table(nseq * tstride, -7), offsets(nseq);
    int total = 0;
    for (int b = 0; b < nseq; ++b) {
      offsets[b] = total;
      total += lens[b];
      for (size_t i = 0; i < cache.seq_tables[b].size(); ++i) table[b * tstride + i] = cache.seq_tables[b][i];
    }
    const int row_bytes = format == IndexerFormat::kFp8 ? 128 : 256;
    DeviceArray<uint8_t> d_pages, d_keys(total * row_bytes);
    d_pages.Upload(cache.pages);
    DeviceArray<int32_t> d_lens, d_offsets, d_table;
    d_lens.Upload(std::vector<int32_t>(lens.begin(), lens.end()));
    d_offsets.Upload(offsets);
    d_table.Upload(table);
    DeviceArray<float> d_scale(total);
    d_keys.Poison();
    d_scale.Poison();
    IndexerGatherParams p;
    p.num_seqs = nseq;
    p.seq_lens = d_lens.get();
    p.out_offsets = d_offsets.get();
    p.max_seq_len = max_len;
    p.block_table = d_table.get();
    p.block_table_stride = tstride;
    p.format = format;
    p.cache = d_pages.get();
    p.keys = d_keys.get();
    p.k_scale = d_scale.get();
    ASSERT_TRUE(LaunchIndexerGather(p, nullptr).ok());
    SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<uint8_t> keys = d_keys.Download();
    const std::vector<float> scales = d_scale.Download();
    const size_t page_bytes = IndexerPageBytes(format);
    for (int b = 0; b < nseq; ++b) {
      for (int s = 0; s < lens[b]; ++s) {
        const uint8_t* page = cache.pages.data() + cache.seq_tables[b][s / 64] * page_bytes;
        ASSERT_EQ(std::memcmp(keys.data() + (offsets[b] + s) * row_bytes, page + (s % 64) * row_bytes, row_bytes), 0)
            << "seq " << b << " key " << s;
        if (format == IndexerFormat::kFp8) {
          float want;
          std::memcpy(&want, page + 64 * 128 + 4 * (s % 64), 4);
          ASSERT_EQ(scales[offsets[b] + s], want);
        }
      }
    }
  }
}

}  // namespace
}  // namespace spar
