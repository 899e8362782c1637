// Fused kv_a_layernorm + RoPE + latent cache write against the reference:
// ref::RmsNorm, ref::ApplyRope and ref::EncodeLatentRow on the same bf16
// inputs; bytes compared row by row, untouched slots must stay untouched.
#include "kernels/cuda/attention/mla_cache.h"

#include <cuda_bf16.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/numeric.h"
#include "base/rng.h"
#include "gtest/gtest.h"
#include "kernels/ref/cache_ref.h"
#include "kernels/ref/norm_ref.h"
#include "kernels/ref/rope_ref.h"
#include "kernels/cuda/small_ops/small_ops.h"
#include "tests/kernels/gpu_test_util.h"

namespace spar {
namespace {

using testing::DeviceArray;

struct Case {
  LatentFormat format;
  bool yarn;
  bool interleaved;
  bool norm;
};

void RunCase(const Case& c) {
  SCOPED_TRACE(::testing::Message() << (c.format == LatentFormat::kBF16 ? "bf16" : "fp8") << " yarn " << c.yarn
                                    << " interleaved " << c.interleaved << " norm " << c.norm);
  const int64_t tokens = 300, stride = 2048 + 576;  // kv rows inside a fused [q_a | kv_a] output
  const int64_t num_slots = 64 * 8;
  const size_t rb = LatentRowBytes(c.format);
  Rng rng(5);
  std::vector<float> kv = testing::RandomFloats(tokens * stride, 6, -2.0f, 2.0f);
  for (auto& v : kv) v = RoundToBf16(v);
  std::vector<float> w = testing::RandomFloats(512, 7, 0.5f, 1.5f);
  for (auto& v : w) v = RoundToBf16(v);
  std::vector<int32_t> pos(tokens), slots(tokens);
  for (int64_t t = 0; t < tokens; ++t) {
    pos[t] = static_cast<int32_t>(rng.Below(200000));
    slots[t] = static_cast<int32_t>(t * 3 % num_slots);  // distinct for t < 512/3... checked below
  }
  slots[5] = -1;    // padding token: skipped
  slots[17] = -7;
  ref::RopeParams rp;
  rp.rotary_dim = 64;
  if (c.yarn) {
    rp.theta = 10000;
    rp.yarn = true;
    rp.yarn_factor = 40;
    rp.yarn_original_max_positions = 4096;
  } else {
    rp.theta = 1e6;
  }
  const std::vector<float> inv = ref::RopeInvFreq(rp);

  // Reference bytes.
  std::vector<uint8_t> want(num_slots * rb, 0xAB);
  std::vector<float> row(576);
  for (int64_t t = 0; t < tokens; ++t) {
    if (slots[t] < 0) continue;
    std::memcpy(row.data(), kv.data() + t * stride, 576 * sizeof(float));
    if (c.norm) ref::RmsNorm(kv.data() + t * stride, stride, 1, 512, w.data(), 1e-5f, row.data(), 576);
    ref::ApplyRope(row.data(), 576, 1, 1, &pos[t], 512, c.interleaved ? ref::RopePairs::kInterleaved : ref::RopePairs::kHalfSplit, rp);
    ref::EncodeLatentRow(c.format, row.data(), want.data() + slots[t] * rb);
  }

  DeviceArray<uint16_t> dkv, dw;
  dkv.Upload(testing::ToBf16(kv));
  dw.Upload(testing::ToBf16(w));
  DeviceArray<int32_t> dpos, dslots;
  dpos.Upload(pos);
  dslots.Upload(slots);
  DeviceArray<float> dinv;
  dinv.Upload(inv);
  DeviceArray<uint8_t> cache(num_slots * rb);
  SPAR_ASSERT_CUDA(cudaMemset(cache.get(), 0xAB, cache.bytes()));
  MlaCacheWriteParams p;
  p.kv = reinterpret_cast<const __nv_bfloat16*>(dkv.get());
  p.tokens = tokens;
  p.kv_stride = stride;
  p.norm_weight = c.norm ? reinterpret_cast<const __nv_bfloat16*>(dw.get()) : nullptr;
  p.eps = 1e-5f;
  p.positions = dpos.get();
  p.inv_freq = dinv.get();
  p.interleaved = c.interleaved;
  p.slot_mapping = dslots.get();
  p.format = c.format;
  p.cache = cache.get();
  p.num_slots = num_slots;
  const absl::Status st = LaunchMlaCacheWrite(p, nullptr);
  ASSERT_TRUE(st.ok()) << st;
  SPAR_ASSERT_CUDA(cudaGetLastError());
  SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
  const std::vector<uint8_t> got = cache.Download();

  // Untouched slots keep the fill; the rope part and the scales must be
  // equal; c may differ by one bf16 / e4m3 step where the fp32 norm differs
  // in its last bit (sum of squares in float vs double).
  int rope_bad = 0, nope_diff = 0, nope_far = 0, scale_far = 0, fill_bad = 0;
  std::vector<float> gr(576), wr(576);
  std::vector<bool> written(num_slots, false);
  for (int64_t t = 0; t < tokens; ++t) {
    if (slots[t] >= 0) written[slots[t]] = true;
  }
  for (int64_t s = 0; s < num_slots; ++s) {
    const uint8_t* g = got.data() + s * rb;
    const uint8_t* e = want.data() + s * rb;
    if (!written[s]) {
      for (size_t b = 0; b < rb; ++b) fill_bad += g[b] != 0xAB;
      continue;
    }
    ref::DecodeLatentRow(c.format, g, gr.data());
    ref::DecodeLatentRow(c.format, e, wr.data());
    for (int i = 512; i < 576; ++i) rope_bad += gr[i] != wr[i];
    if (c.format == LatentFormat::kFp8Ds) {
      for (int tile = 0; tile < 4; ++tile) {
        float gs, es;
        std::memcpy(&gs, g + 512 + 4 * tile, 4);
        std::memcpy(&es, e + 512 + 4 * tile, 4);
        if (std::fabs(gs - es) > 1e-6f * es) ++scale_far;
      }
    }
    for (int i = 0; i < 512; ++i) {
      if (c.format == LatentFormat::kFp8Ds) {
        // Compare codes: a tile's scale may differ in its last bit (amax of
        // an fp32 norm summed in float here, double in the reference), which
        // moves every decoded value of the tile without changing a code.
        if (g[i] == e[i]) continue;
        ++nope_diff;
        const bool same_sign = (g[i] & 0x80) == (e[i] & 0x80);
        if (!same_sign || std::abs((g[i] & 0x7f) - (e[i] & 0x7f)) > 1) ++nope_far;
        continue;
      }
      if (gr[i] == wr[i]) continue;
      ++nope_diff;
      // One bf16 step at this magnitude.
      if (std::fabs(gr[i] - wr[i]) > (std::fabs(wr[i]) / 128.0f + 1e-30f) * 1.01f) ++nope_far;
    }
  }
  EXPECT_EQ(fill_bad, 0) << "bytes written outside the mapped slots";
  EXPECT_EQ(rope_bad, 0) << "rope values differ";
  EXPECT_EQ(scale_far, 0) << "fp8 scales differ";
  EXPECT_EQ(nope_far, 0) << "c values off by more than one step";
  EXPECT_LE(nope_diff, 512 * tokens / 200) << "too many one-step differences";
}

TEST(MlaCacheWrite, MatchesReference) {
  SPAR_REQUIRE_GPU();
  for (LatentFormat f : {LatentFormat::kBF16, LatentFormat::kFp8Ds}) {
    RunCase({f, false, true, true});   // GLM-5
    RunCase({f, true, true, true});    // DeepSeek-V3.2 (YaRN)
    RunCase({f, false, false, true});  // half-split pairs
    RunCase({f, true, true, false});   // pre-normalised input
  }
}

// The queries' RoPE in the same launch (MlaCacheWriteParams::query_rope)
// against the cache write alone followed by LaunchRopeApply: the cache bytes
// and the roped lanes must be equal bit for bit, and the other query lanes
// untouched. 37 tokens x 8 heads of GLM-5's q layout (192 + 64 per head).
TEST(MlaCacheWrite, QueryRopeInTheSameLaunchEqualsRopeApply) {
  SPAR_REQUIRE_GPU();
  const int64_t tokens = 37, heads = 8, qdim = 256, stride = 576, num_slots = 128;
  for (LatentFormat f : {LatentFormat::kBF16, LatentFormat::kFp8Ds}) {
    SCOPED_TRACE(f == LatentFormat::kBF16 ? "bf16" : "fp8");
    const size_t rb = LatentRowBytes(f);
    Rng rng(11);
    std::vector<int32_t> pos(tokens), slots(tokens);
    for (int64_t t = 0; t < tokens; ++t) {
      pos[t] = static_cast<int32_t>(rng.Below(150000));
      slots[t] = static_cast<int32_t>((t * 5) % num_slots);
    }
    slots[3] = -1;  // a padding token: its cache row is skipped, its query still roped
    ref::RopeParams rp;
    rp.theta = 1e6;
    DeviceArray<float> dinv;
    dinv.Upload(ref::RopeInvFreq(rp));
    DeviceArray<uint16_t> dkv, dw, dq, out_a(tokens * heads * 576), out_b(tokens * heads * 576);
    dkv.Upload(testing::ToBf16(testing::RandomFloats(tokens * stride, 12, -2.0f, 2.0f)));
    dw.Upload(testing::ToBf16(testing::RandomFloats(512, 13, 0.5f, 1.5f)));
    dq.Upload(testing::ToBf16(testing::RandomFloats(tokens * heads * qdim, 14, -3.0f, 3.0f)));
    DeviceArray<int32_t> dpos, dslots;
    dpos.Upload(pos);
    dslots.Upload(slots);
    DeviceArray<uint8_t> cache_a(num_slots * rb), cache_b(num_slots * rb);
    for (auto* c : {&cache_a, &cache_b}) SPAR_ASSERT_CUDA(cudaMemset(c->get(), 0xAB, c->bytes()));
    out_a.Poison();
    out_b.Poison();
    MlaCacheWriteParams p;
    p.kv = reinterpret_cast<const __nv_bfloat16*>(dkv.get());
    p.tokens = tokens;
    p.kv_stride = stride;
    p.norm_weight = reinterpret_cast<const __nv_bfloat16*>(dw.get());
    p.positions = dpos.get();
    p.inv_freq = dinv.get();
    p.slot_mapping = dslots.get();
    p.format = f;
    p.num_slots = num_slots;
    RopeApplyParams r;
    r.in = reinterpret_cast<const __nv_bfloat16*>(dq.get());
    r.in_stride = qdim;
    r.in_offset = 192;
    r.out_stride = 576;
    r.out_offset = 512;
    r.rows = tokens * heads;
    r.rows_per_position = heads;
    r.positions = dpos.get();
    r.inv_freq = dinv.get();
    // Two launches.
    p.cache = cache_a.get();
    ASSERT_TRUE(LaunchMlaCacheWrite(p, nullptr).ok());
    r.out = reinterpret_cast<__nv_bfloat16*>(out_a.get());
    ASSERT_TRUE(LaunchRopeApply(r, nullptr).ok());
    // One.
    p.cache = cache_b.get();
    r.out = reinterpret_cast<__nv_bfloat16*>(out_b.get());
    p.query_rope = r;
    const absl::Status st = LaunchMlaCacheWrite(p, nullptr);
    ASSERT_TRUE(st.ok()) << st;
    SPAR_ASSERT_CUDA(cudaGetLastError());
    SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
    EXPECT_TRUE(cache_a.Download() == cache_b.Download()) << "cache bytes differ";
    const std::vector<uint16_t> a = out_a.Download(), b = out_b.Download();
    int64_t differ = 0, roped = 0, touched_elsewhere = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      differ += a[i] != b[i];
      const bool rope_lane = i % 576 >= 512;
      roped += rope_lane && b[i] != 0xFFFF;
      touched_elsewhere += !rope_lane && b[i] != 0xFFFF;
    }
    EXPECT_EQ(differ, 0);
    EXPECT_EQ(roped, tokens * heads * 64);
    EXPECT_EQ(touched_elsewhere, 0);
  }
  MlaCacheWriteParams bad;
  bad.tokens = 1;
  bad.kv = reinterpret_cast<const __nv_bfloat16*>(uintptr_t{256});
  bad.kv_stride = 576;
  bad.slot_mapping = reinterpret_cast<const int32_t*>(uintptr_t{256});
  bad.cache = reinterpret_cast<uint8_t*>(uintptr_t{256});
  bad.num_slots = 1;
  bad.query_rope.rows = 4;  // no buffers
  const absl::Status st = LaunchMlaCacheWrite(bad, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("query_rope"), std::string::npos) << st;
}

TEST(MlaCacheWrite, RejectsBadParams) {
  MlaCacheWriteParams p;
  p.tokens = 1;
  EXPECT_EQ(LaunchMlaCacheWrite(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  p.format = LatentFormat::kF32;
  EXPECT_EQ(LaunchMlaCacheWrite(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace spar
