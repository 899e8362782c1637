#include "engine/make_tiny.h"

#include <cmath>
#include <cstring>

#include "base/hash.h"
#include "base/numeric.h"
#include "engine/checkpoint.h"
#include "tests/engine/test_util.h"
#include "engine/weight_names.h"
#include "gtest/gtest.h"
#include "kernels/ref/fp8_block_ref.h"

namespace spar {
namespace {

std::string HashDir(const std::string& dir, bool hf_quant_config = false) {
  Fnv1a64 h;
  std::vector<const char*> files = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                                    "generation_config.json"};
  if (hf_quant_config) files.push_back("hf_quant_config.json");
  for (const char* f : files) {
    auto text = ReadFileToString(dir + "/" + f);
    EXPECT_TRUE(text.ok()) << f;
    h.Update(f);
    h.Update(text.ok() ? *text : "");
  }
  return h.HexDigest();
}

std::string Make(const std::string& name, ModelArch arch, bool fp8, uint64_t seed) {
  MakeTinyOptions o;
  o.arch = arch;
  o.fp8 = fp8;
  o.seed = seed;
  o.out_dir = testing::TempDir(name);
  EXPECT_TRUE(MakeTinyModel(o).ok());
  return o.out_dir;
}

// The pinned hashes change only when make-tiny's output format or generator
// changes on purpose; then update them here and regenerate the goldens.
TEST(MakeTinyTest, OutputIsPinned) {
  EXPECT_EQ(HashDir(Make("glm5_bf16", ModelArch::kGlmMoeDsa, false, 0)), "ae61d2c93ab1560e");
  EXPECT_EQ(HashDir(Make("glm5_fp8", ModelArch::kGlmMoeDsa, true, 0)), "bd0737413564ee31");
  EXPECT_EQ(HashDir(Make("dsv32_bf16", ModelArch::kDeepseekV32, false, 0)), "6ee42a9ac510e24a");
  EXPECT_EQ(HashDir(Make("dsv32_fp8", ModelArch::kDeepseekV32, true, 0)), "ffbc43477a9da505");
}

std::string MakeQuant(const std::string& name, TinyQuant quant, uint64_t seed) {
  MakeTinyOptions o;
  o.quant = quant;
  o.seed = seed;
  o.out_dir = testing::TempDir(name);
  EXPECT_TRUE(MakeTinyModel(o).ok());
  return o.out_dir;
}

// The 4-bit checkpoints behind the quantized goldens.
TEST(MakeTinyTest, QuantOutputIsPinned) {
  EXPECT_EQ(HashDir(MakeQuant("pin_awq", TinyQuant::kAwq, 0)), "70de5ebe561d8ee6");
  EXPECT_EQ(HashDir(MakeQuant("pin_gptq", TinyQuant::kGptq, 0)), "dbc8bdebe8a4220e");
  EXPECT_EQ(HashDir(MakeQuant("pin_ct", TinyQuant::kInt4Ct, 0)), "d34f8ede896710e6");
  EXPECT_EQ(HashDir(MakeQuant("pin_nvfp4", TinyQuant::kNvfp4, 0), /*hf_quant_config=*/true), "57a592c2400da1de");
}

TEST(MakeTinyTest, QuantNeedsNoFp8AndKnownNames) {
  MakeTinyOptions o;
  o.quant = TinyQuant::kAwq;
  o.fp8 = true;
  o.out_dir = testing::TempDir("quant_fp8");
  EXPECT_FALSE(MakeTinyModel(o).ok());
  EXPECT_FALSE(ParseTinyQuant("int8").ok());
  for (TinyQuant q : {TinyQuant::kAwq, TinyQuant::kGptq, TinyQuant::kInt4Ct, TinyQuant::kNvfp4}) {
    EXPECT_EQ(*ParseTinyQuant(TinyQuantName(q)), q);
  }
}

TEST(MakeTinyTest, SameSeedSameBytesOtherSeedOtherBytes) {
  const std::string a = HashDir(Make("seed_a", ModelArch::kGlmMoeDsa, false, 7));
  const std::string b = HashDir(Make("seed_b", ModelArch::kGlmMoeDsa, false, 7));
  const std::string c = HashDir(Make("seed_c", ModelArch::kGlmMoeDsa, false, 8));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(MakeTinyTest, RealLayoutAndShapes) {
  const std::string dir = Make("layout", ModelArch::kGlmMoeDsa, true, 0);
  auto config = LoadModelConfig(dir + "/config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->kv_lora_rank, 512);
  EXPECT_EQ(config->qk_rope_head_dim, 64);
  EXPECT_EQ(config->index_head_dim, 128);
  EXPECT_LT(config->index_topk, 100);
  EXPECT_TRUE(config->quant.fp8);
  int dense = 0, moe = 0;
  for (int i = 0; i < config->num_hidden_layers; ++i) (config->is_moe_layer(i) ? moe : dense)++;
  EXPECT_GE(dense, 1);
  EXPECT_GE(moe, 2);
  auto ck = Checkpoint::Open(dir);
  ASSERT_TRUE(ck.ok()) << ck.status();
  const int64_t h = config->hidden_size;
  // kv_a is 576 rows: the last 128-row scale block is half filled.
  EXPECT_TRUE((*ck)->GetChecked(names::Layer(0, names::kKvA), DType::kF8E4M3, {576, h}).ok());
  EXPECT_TRUE((*ck)->GetChecked(names::Layer(0, "self_attn.kv_a_proj_with_mqa.weight_scale_inv"), DType::kF32,
                                {5, (h + 127) / 128}).ok());
  EXPECT_TRUE((*ck)->GetChecked(names::Layer(1, names::kRouterBias), DType::kF32, {config->n_routed_experts}).ok());
  EXPECT_TRUE((*ck)->GetChecked(names::Expert(2, 15, "down_proj"), DType::kF8E4M3,
                                {h, config->moe_intermediate_size}).ok());
  EXPECT_TRUE((*ck)->GetChecked(names::Layer(0, names::kIdxWeights), DType::kBF16, {config->index_n_heads, h}).ok());
  EXPECT_TRUE((*ck)->GetChecked(names::Layer(0, names::kIdxKNormB), DType::kBF16, {128}).ok());
  EXPECT_TRUE((*ck)->GetChecked(names::kLmHead, DType::kBF16, {config->vocab_size, h}).ok());
  EXPECT_TRUE((*ck)->GetChecked(names::Layer(1, names::kSharedDown), DType::kF8E4M3,
                                {h, config->moe_intermediate_size}).ok());
}

TEST(MakeTinyTest, Fp8IsTheBlockQuantizedBf16Model) {
  const std::string bf = Make("pair_bf16", ModelArch::kDeepseekV32, false, 3);
  const std::string f8 = Make("pair_fp8", ModelArch::kDeepseekV32, true, 3);
  auto a = Checkpoint::Open(bf);
  auto b = Checkpoint::Open(f8);
  ASSERT_TRUE(a.ok() && b.ok());
  const std::string name = names::Layer(0, names::kQB);
  auto w16 = (*a)->Get(name);
  auto w8 = (*b)->Get(name);
  auto s = (*b)->Get(names::ScaleOf(name));
  ASSERT_TRUE(w16.ok() && w8.ok() && s.ok());
  const int64_t rows = w16->shape[0], cols = w16->shape[1];
  std::vector<float> deq(rows * cols);
  DequantizeFp8Blocks(w8->data, reinterpret_cast<const float*>(s->data), rows, cols, 128, deq.data());
  const float* scales = reinterpret_cast<const float*>(s->data);
  const int64_t scale_cols = (cols + 127) / 128;
  int64_t exact = 0;
  for (int64_t i = 0; i < rows * cols; ++i) {
    uint16_t bits;
    std::memcpy(&bits, w16->data + 2 * i, 2);
    const float ref = Bf16ToFloat(bits);
    const float scale = scales[(i / cols / 128) * scale_cols + (i % cols) / 128];
    // Round to nearest with 3 mantissa bits: error <= |x| / 16 for normals,
    // <= half the subnormal quantum (2^-10 * scale) below that.
    const float bound = std::max(std::fabs(ref) / 16.0f, std::ldexp(scale, -10)) * 1.0001f;
    ASSERT_LE(std::fabs(deq[i] - ref), bound) << "element " << i;
    exact += deq[i] == ref;
  }
  EXPECT_LT(exact, rows * cols);  // it really is quantized
  // ue8m0: DeepSeek-V3.2 scales are powers of two.
  for (int64_t i = 0; i < s->numel(); ++i) {
    int e;
    EXPECT_EQ(std::frexp(reinterpret_cast<const float*>(s->data)[i], &e), 0.5f);
  }
}

TEST(MakeTinyTest, RejectsBadOptions) {
  MakeTinyOptions o;
  EXPECT_FALSE(MakeTinyModel(o).ok());  // no output dir
  o.out_dir = testing::TempDir("bad_opts");
  o.arch = ModelArch::kDeepseekV32;
  o.geometry = TinyGeometry::kGlm5Full;
  EXPECT_FALSE(MakeTinyModel(o).ok());
}

}  // namespace
}  // namespace spar
