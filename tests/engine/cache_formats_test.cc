// The cache formats users choose (--kv-cache-dtype, --indexer-cache-dtype):
// the flag values and what auto means per backend; the cpu backend storing
// exactly what kernels/ref's codecs write (so the cuda backend can be
// compared with it in the same format); the cpu engine in those formats
// (decode equals prefill, and the format really is in effect).
#include "engine/cache_formats.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>

#include "base/rng.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "engine/make_tiny.h"
#include "gtest/gtest.h"
#include "kernels/ref/cache_ref.h"
#include "tests/engine/test_util.h"

namespace spar {
namespace {

TEST(CacheDtypeFlagsTest, ValuesAndVllmSpellings) {
  EXPECT_EQ(*ParseKvCacheDtype("auto"), std::nullopt);
  EXPECT_EQ(*ParseKvCacheDtype("bf16"), LatentFormat::kBF16);
  EXPECT_EQ(*ParseKvCacheDtype("bfloat16"), LatentFormat::kBF16);
  EXPECT_EQ(*ParseKvCacheDtype("fp8"), LatentFormat::kFp8Ds);
  EXPECT_EQ(*ParseKvCacheDtype("FP8_DS_MLA"), LatentFormat::kFp8Ds);
  EXPECT_EQ(*ParseKvCacheDtype("fp32"), LatentFormat::kF32);
  EXPECT_EQ(*ParseIndexerCacheDtype("auto"), std::nullopt);
  EXPECT_EQ(*ParseIndexerCacheDtype("fp8"), IndexerFormat::kFp8);
  EXPECT_EQ(*ParseIndexerCacheDtype("bf16"), IndexerFormat::kBF16);
  EXPECT_EQ(*ParseIndexerCacheDtype("fp32"), IndexerFormat::kF32);
  // The names print back as the flag values.
  for (LatentFormat f : {LatentFormat::kF32, LatentFormat::kBF16, LatentFormat::kFp8Ds}) {
    EXPECT_EQ(*ParseKvCacheDtype(LatentFormatName(f)), f);
  }
  for (IndexerFormat f : {IndexerFormat::kF32, IndexerFormat::kBF16, IndexerFormat::kFp8}) {
    EXPECT_EQ(*ParseIndexerCacheDtype(IndexerFormatName(f)), f);
  }
}

TEST(CacheDtypeFlagsTest, BadValuesNameTheFlag) {
  auto kv = ParseKvCacheDtype("fp16");
  ASSERT_FALSE(kv.ok());
  EXPECT_EQ(kv.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(kv.status().message().find("--kv-cache-dtype"), absl::string_view::npos) << kv.status();
  EXPECT_NE(kv.status().message().find("\"fp16\""), absl::string_view::npos) << kv.status();
  auto idx = ParseCacheDtypes("auto", "int8");
  ASSERT_FALSE(idx.ok());
  EXPECT_NE(idx.status().message().find("--indexer-cache-dtype"), absl::string_view::npos) << idx.status();
  EXPECT_FALSE(ParseKvCacheDtype("").ok());
}

TEST(CacheDtypeFlagsTest, AutoPerBackendAndFp32IsCpuOnly) {
  const CacheDtypes autos;
  EXPECT_EQ(*ResolveCacheFormats("cpu", autos), (CacheFormats{LatentFormat::kF32, IndexerFormat::kF32}));
  EXPECT_EQ(*ResolveCacheFormats("cuda", autos), (CacheFormats{LatentFormat::kBF16, IndexerFormat::kFp8}));
  const CacheDtypes exact{LatentFormat::kFp8Ds, IndexerFormat::kBF16};
  EXPECT_EQ(*ResolveCacheFormats("cpu", exact), (CacheFormats{LatentFormat::kFp8Ds, IndexerFormat::kBF16}));
  EXPECT_EQ(*ResolveCacheFormats("cuda", exact), (CacheFormats{LatentFormat::kFp8Ds, IndexerFormat::kBF16}));
  auto bad = ResolveCacheFormats("cuda", CacheDtypes{LatentFormat::kF32, std::nullopt});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("fp32"), absl::string_view::npos) << bad.status();
  EXPECT_EQ(DescribeCacheFormats({LatentFormat::kFp8Ds, IndexerFormat::kFp8}), "latent fp8, indexer fp8");
}

// ---- the cpu backend stores what the codecs write ----

struct Formats {
  LatentFormat latent;
  IndexerFormat indexer;
};

class CpuCacheCodecTest : public ::testing::TestWithParam<Formats> {};

TensorView FloatView(const std::vector<float>& v, const char* name) {
  TensorView t;
  t.name = name;
  t.dtype = DType::kF32;
  t.shape = {static_cast<int64_t>(v.size())};
  t.data = reinterpret_cast<const uint8_t*>(v.data());
  t.nbytes = v.size() * sizeof(float);
  return t;
}

// One layer's cache writes on two cpu backends fed the same inputs: one
// keeps fp32 rows (exact), one the format under test. Every row the second
// stores must be byte for byte the codec's encoding of the first's fp32 row,
// and attention must read it back through the codec's decoding.
TEST_P(CpuCacheCodecTest, StoredRowsAreTheCodecOfTheExactRows) {
  const Formats f = GetParam();
  constexpr int kBlocks = 4, kTokens = 100;
  Rng rng(11);
  auto random = [&](size_t n, float scale) {
    std::vector<float> v(n);
    for (auto& x : v) x = scale * (static_cast<float>(rng.Below(20001)) / 10000.0f - 1.0f);
    return v;
  };
  const std::vector<float> kv_norm = random(kLatentNopeDim, 1.0f), k_norm_w = random(kIndexerHeadDim, 1.0f),
                           k_norm_b = random(kIndexerHeadDim, 0.1f);
  const std::vector<float> kv_a = random(size_t{kTokens} * kLatentDim, 3.0f),
                           keys = random(size_t{kTokens} * kIndexerHeadDim, 2.0f);
  StepPlan plan;
  SequenceStep seq;
  seq.tokens.assign(kTokens, 1);
  seq.block_table = {2, 0};  // slots in two non-adjacent blocks
  seq.num_logits = 0;
  plan.seqs.push_back(seq);
  ASSERT_TRUE(plan.Finalize(0, 0, kBlocks).ok());
  ref::RopeParams rope;
  rope.rotary_dim = kLatentRopeDim;
  rope.theta = 1e4;
  IndexerSpec idx;
  idx.heads = 1;
  idx.topk = 8;

  std::unique_ptr<Backend> backends[2] = {CreateCpuBackend(), CreateCpuBackend()};
  const CacheSpec specs[2] = {{.num_layers = 1, .num_blocks = kBlocks},
                              {.num_layers = 1, .num_blocks = kBlocks, .latent_format = f.latent,
                               .indexer_format = f.indexer}};
  for (int i = 0; i < 2; ++i) {
    Backend& b = *backends[i];
    ASSERT_TRUE(b.SetRope(rope, 4096).ok());
    ASSERT_EQ(*b.AllocateCaches(specs[i]), kBlocks);
    auto norm = b.CreateVector(FloatView(kv_norm, "kv_norm"));
    auto kw = b.CreateVector(FloatView(k_norm_w, "k_norm_w"));
    auto kb = b.CreateVector(FloatView(k_norm_b, "k_norm_b"));
    ASSERT_TRUE(norm.ok() && kw.ok() && kb.ok());
    ASSERT_TRUE(b.BeginStep(plan).ok());
    auto latent_in = b.FromHost(kv_a, kTokens, kLatentDim);
    auto key_in = b.FromHost(keys, kTokens, kIndexerHeadDim);
    ASSERT_TRUE(latent_in.ok() && key_in.ok());
    ASSERT_TRUE(b.WriteLatentCache(0, *latent_in, **norm, 1e-6f).ok());
    ASSERT_TRUE(b.WriteIndexerCache(0, *key_in, **kw, **kb, 1e-6f, idx).ok());
  }
  using Kind = Backend::CacheKind;
  const size_t row_bytes = LatentRowBytes(f.latent);
  int64_t rows_checked = 0;
  for (int32_t block : seq.block_table) {
    auto exact_rows = backends[0]->ReadCacheBlock(Kind::kLatent, 0, block);
    auto stored_rows = backends[1]->ReadCacheBlock(Kind::kLatent, 0, block);
    auto exact_page = backends[0]->ReadCacheBlock(Kind::kIndexer, 0, block);
    auto stored_page = backends[1]->ReadCacheBlock(Kind::kIndexer, 0, block);
    ASSERT_TRUE(exact_rows.ok() && stored_rows.ok() && exact_page.ok() && stored_page.ok());
    ASSERT_EQ(stored_rows->size(), kCacheBlockTokens * row_bytes);
    ASSERT_EQ(stored_page->size(), IndexerPageBytes(f.indexer));
    std::vector<uint8_t> want_page(IndexerPageBytes(f.indexer), 0);
    for (int off = 0; off < kCacheBlockTokens; ++off) {
      const int pos = (block == 2 ? 0 : kCacheBlockTokens) + off;
      if (pos >= kTokens) continue;  // never written
      float row[kLatentDim], key[kIndexerHeadDim], scale;
      std::memcpy(row, exact_rows->data() + off * LatentRowBytes(LatentFormat::kF32), sizeof(row));
      std::vector<uint8_t> want(row_bytes);
      ref::EncodeLatentRow(f.latent, row, want.data());
      ASSERT_EQ(0, std::memcmp(want.data(), stored_rows->data() + off * row_bytes, row_bytes)) << "position " << pos;
      ref::DecodeIndexerKey(IndexerFormat::kF32, exact_page->data(), off, key, &scale);
      ref::EncodeIndexerKey(f.indexer, key, want_page.data(), off);
      ++rows_checked;
    }
    EXPECT_EQ(*stored_page, want_page) << "indexer page of block " << block;
  }
  EXPECT_EQ(rows_checked, kTokens);

  // Attention reads the stored row through the codec: one selected key has
  // weight exactly 1, so the output is that key's decoded value part.
  const int32_t slot = plan.slots[70];
  std::vector<float> q(kLatentDim, 0.25f);
  auto q_abs = backends[1]->FromHost(q, 1, kLatentDim);
  ASSERT_TRUE(q_abs.ok());
  std::shared_ptr<void> storage(new int32_t[1]{slot}, [](void* p) { delete[] static_cast<int32_t*>(p); });
  Tensor one(DType::kI32, 1, 1, storage, storage.get(), 1);
  auto out = backends[1]->SparseMla(0, *q_abs, one, 0.1f);
  ASSERT_TRUE(out.ok()) << out.status();
  auto got = backends[1]->ToHost(*out);
  auto stored = backends[1]->ReadCacheBlock(Kind::kLatent, 0, slot / kCacheBlockTokens);
  ASSERT_TRUE(got.ok() && stored.ok());
  float decoded[kLatentDim];
  ref::DecodeLatentRow(f.latent, stored->data() + (slot % kCacheBlockTokens) * row_bytes, decoded);
  EXPECT_EQ(*got, std::vector<float>(decoded, decoded + kLatentNopeDim));
}

INSTANTIATE_TEST_SUITE_P(Formats, CpuCacheCodecTest,
                         ::testing::Values(Formats{LatentFormat::kFp8Ds, IndexerFormat::kBF16},
                                           Formats{LatentFormat::kFp8Ds, IndexerFormat::kFp8},
                                           Formats{LatentFormat::kBF16, IndexerFormat::kFp8}),
                         [](const ::testing::TestParamInfo<Formats>& info) {
                           return std::string(LatentFormatName(info.param.latent)) + "_latent_" +
                                  IndexerFormatName(info.param.indexer) + "_indexer";
                         });

// ---- the cpu engine in the cuda formats ----

class CpuEngineFormatsTest : public ::testing::TestWithParam<ModelArch> {
 protected:
  static std::unique_ptr<Engine> Make(const std::string& dir, CacheDtypes dtypes) {
    EngineOptions eo;
    eo.model.num_blocks = 64;
    eo.cache_dtypes = dtypes;
    auto e = Engine::Create(dir, eo);
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? std::move(*e) : nullptr;
  }
  std::string Model() {
    MakeTinyOptions o;
    o.arch = GetParam();
    o.seed = 9;
    o.out_dir = testing::TempDir("cache_formats_engine");
    EXPECT_TRUE(MakeTinyModel(o).ok());
    return o.out_dir;
  }
};

// The FP8 latent rows with bf16 indexer keys (exact mode's cpu side): a
// decode step reads the same quantized rows a prefill does, so generating
// token by token gives the prefill's logits; and the logits are not the
// fp32 caches' (the format is really in effect) but close to them.
TEST_P(CpuEngineFormatsTest, Fp8LatentDecodeEqualsPrefillAndDiffersFromFp32) {
  const std::string dir = Model();
  auto fp8 = Make(dir, {LatentFormat::kFp8Ds, IndexerFormat::kBF16});
  auto fp32 = Make(dir, {});
  ASSERT_TRUE(fp8 && fp32);
  GenerationRequest r;
  r.prompt = testing::RandomTokens(70, 3);  // beyond index_topk (32): sparse decode
  r.sampling.temperature = 0;
  r.max_tokens = 10;
  r.ignore_eos = true;
  r.top_logprobs = 5;
  auto gen = fp8->Generate({r});
  ASSERT_TRUE(gen.ok()) << gen.status();
  std::vector<int32_t> full = r.prompt;
  for (const auto& t : (*gen)[0].tokens) full.push_back(t.id);
  const std::vector<int32_t> prefix(full.begin(), full.end() - 1);
  auto logits = fp8->PromptLogits({prefix}, r.max_tokens);
  auto exact = fp32->PromptLogits({prefix}, r.max_tokens);
  ASSERT_TRUE(logits.ok() && exact.ok());
  double moved = 0, scale = 0;
  for (int i = 0; i < r.max_tokens; ++i) {
    const auto& row = (*logits)[0][i];
    double mx = -1e30, sum = 0;
    for (float v : row) mx = std::max<double>(mx, v);
    for (float v : row) sum += std::exp(v - mx);
    const auto& tok = (*gen)[0].tokens[i];
    for (const auto& [id, lp] : tok.top) EXPECT_NEAR(lp, row[id] - mx - std::log(sum), 1e-4) << "step " << i;
    EXPECT_EQ(std::max_element(row.begin(), row.end()) - row.begin(), tok.id) << "step " << i;
    for (size_t v = 0; v < row.size(); ++v) {
      moved = std::max<double>(moved, std::fabs(row[v] - (*exact)[0][i][v]));
      scale = std::max<double>(scale, std::fabs((*exact)[0][i][v]));
    }
  }
  EXPECT_GT(moved, 0) << "the FP8 caches gave the fp32 caches' logits bit for bit";
  std::cout << "fp8 latent + bf16 indexer vs fp32 caches, sparse: max logit change " << moved << " of scale " << scale
            << "\n";
  // Dense attention (a context within index_topk): no selection can flip.
  // e4m3 keeps 3 mantissa bits, so rows move by a few % (and a rare MoE
  // router flip by more: measured 4-8 % typical, one row in 8 up to 33 %);
  // reading the wrong bytes would move them by ~100 %.
  auto short_fp8 = fp8->PromptLogits({testing::RandomTokens(24, 5)}, 8);
  auto short_fp32 = fp32->PromptLogits({testing::RandomTokens(24, 5)}, 8);
  ASSERT_TRUE(short_fp8.ok() && short_fp32.ok());
  std::vector<double> errs;
  for (int i = 0; i < 8; ++i) {
    double err = 0, s = 0;
    for (size_t v = 0; v < (*short_fp32)[0][i].size(); ++v) {
      err = std::max<double>(err, std::fabs((*short_fp8)[0][i][v] - (*short_fp32)[0][i][v]));
      s = std::max<double>(s, std::fabs((*short_fp32)[0][i][v]));
    }
    errs.push_back(err / s);
  }
  std::sort(errs.begin(), errs.end());
  std::cout << "dense rows, relative change: median " << errs[4] << ", worst " << errs.back() << "\n";
  EXPECT_LT(errs[4], 0.15);
}

INSTANTIATE_TEST_SUITE_P(Arch, CpuEngineFormatsTest, ::testing::Values(ModelArch::kGlmMoeDsa, ModelArch::kDeepseekV32),
                         [](const ::testing::TestParamInfo<ModelArch>& info) {
                           return info.param == ModelArch::kGlmMoeDsa ? std::string("glm5") : std::string("dsv32");
                         });

}  // namespace
}  // namespace spar
