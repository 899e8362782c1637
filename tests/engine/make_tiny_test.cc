#include "engine/make_tiny.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "base/hash.h"
#include "base/numeric.h"
#include "absl/strings/str_cat.h"
#include "engine/checkpoint.h"
#include "engine/matrix_source.h"
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

// --moe-intermediate-size: every routed expert (and the shared one, of
// that width times n_shared_experts) at the given width; a width the
// kernels' activation rows cannot take is refused with the flag's name.
TEST(MakeTinyTest, ExpertWidthOverride) {
  for (bool fp8 : {false, true}) {
    MakeTinyOptions o;
    o.fp8 = fp8;
    o.moe_intermediate_size = 96;
    o.out_dir = testing::TempDir(fp8 ? "expert96_fp8" : "expert96_bf16");
    ASSERT_TRUE(MakeTinyModel(o).ok());
    auto config = LoadModelConfig(o.out_dir + "/config.json");
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->moe_intermediate_size, 96);
    auto ck = Checkpoint::Open(o.out_dir);
    ASSERT_TRUE(ck.ok()) << ck.status();
    const int l = config->first_k_dense_replace;  // the first MoE layer
    const int64_t h = config->hidden_size;
    const DType t = fp8 ? DType::kF8E4M3 : DType::kBF16;
    for (int e : {0, config->n_routed_experts - 1}) {
      EXPECT_TRUE((*ck)->GetChecked(names::Expert(l, e, "gate_proj"), t, {96, h}).ok()) << e;
      EXPECT_TRUE((*ck)->GetChecked(names::Expert(l, e, "down_proj"), t, {h, 96}).ok()) << e;
    }
  }
  for (int64_t bad : {int64_t{100}, int64_t{-8}, int64_t{8200}}) {
    MakeTinyOptions o;
    o.moe_intermediate_size = bad;
    o.out_dir = testing::TempDir("expert_bad");
    const absl::Status st = MakeTinyModel(o);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("--moe-intermediate-size"), std::string::npos) << st;
  }
}

TEST(MakeTinyTest, MtpLayerInTheRealNaming) {
  for (ModelArch arch : {ModelArch::kGlmMoeDsa, ModelArch::kDeepseekV32}) {
    MakeTinyOptions o;
    o.arch = arch;
    o.fp8 = true;
    o.mtp = true;
    o.out_dir = testing::TempDir(arch == ModelArch::kGlmMoeDsa ? "mtp_glm" : "mtp_ds");
    ASSERT_TRUE(MakeTinyModel(o).ok());
    auto config = LoadModelConfig(o.out_dir + "/config.json");
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->num_nextn_predict_layers, 1);
    const int l = config->num_hidden_layers;
    const int64_t h = config->hidden_size, v = config->vocab_size;
    auto ck = Checkpoint::Open(o.out_dir);
    ASSERT_TRUE(ck.ok()) << ck.status();
    for (const char* n : {names::kMtpEnorm, names::kMtpHnorm, names::kMtpHeadNorm}) {
      EXPECT_TRUE((*ck)->GetChecked(names::Layer(l, n), DType::kBF16, {h}).ok()) << n;
    }
    // eh_proj stays bf16 (modules_to_not_convert); the decoder layer is FP8 and MoE with an indexer.
    EXPECT_TRUE((*ck)->GetChecked(names::Layer(l, names::kMtpEhProj), DType::kBF16, {h, 2 * h}).ok());
    EXPECT_TRUE((*ck)->GetChecked(names::Layer(l, names::kQA), DType::kF8E4M3, {config->q_lora_rank, h}).ok());
    EXPECT_TRUE((*ck)->Has(names::Layer(l, names::kIdxWqB)));
    EXPECT_TRUE((*ck)->Has(names::Expert(l, config->n_routed_experts - 1, "down_proj")));
    EXPECT_TRUE((*ck)->Has(names::Layer(l, names::kRouterBias)));
    const auto& skip = config->quant.modules_to_not_convert;
    EXPECT_NE(std::find(skip.begin(), skip.end(), "eh_proj"), skip.end());
    // DeepSeek stores the layer's own embedding and head: copies of the main ones.
    const bool ds = arch == ModelArch::kDeepseekV32;
    EXPECT_EQ((*ck)->Has(names::Layer(l, names::kMtpEmbed)), ds);
    EXPECT_EQ((*ck)->Has(names::Layer(l, names::kMtpHead)), ds);
    if (ds) {
      auto a = (*ck)->GetChecked(names::Layer(l, names::kMtpHead), DType::kBF16, {v, h});
      auto b = (*ck)->GetChecked(names::kLmHead, DType::kBF16, {v, h});
      ASSERT_TRUE(a.ok() && b.ok());
      EXPECT_EQ(std::memcmp(a->data, b->data, static_cast<size_t>(v * h * 2)), 0);
    }
    EXPECT_FALSE((*ck)->Has(names::Layer(l + 1, names::kQA)));
  }
  // Without --mtp nothing changes (OutputIsPinned) and there is no layer l.
  const std::string plain = Make("no_mtp", ModelArch::kGlmMoeDsa, false, 0);
  auto ck = Checkpoint::Open(plain);
  ASSERT_TRUE(ck.ok());
  EXPECT_FALSE((*ck)->Has(names::Layer(3, names::kMtpEhProj)));
}

// 4-bit checkpoints with the MTP layer: its decoder layer is converted like
// the others, its own projections (eh_proj, DeepSeek's embedding and head
// copies) stay bf16, and the config says so, so the engine loads it.
TEST(MakeTinyTest, MtpLayerOf4BitCheckpointsKeepsItsProjectionsBf16) {
  for (TinyQuant q : {TinyQuant::kAwq, TinyQuant::kGptq, TinyQuant::kNvfp4}) {
    MakeTinyOptions o;
    o.arch = ModelArch::kDeepseekV32;
    o.quant = q;
    o.mtp = true;
    o.out_dir = testing::TempDir(absl::StrCat("mtp_4bit_", TinyQuantName(q)));
    ASSERT_TRUE(MakeTinyModel(o).ok()) << TinyQuantName(q);
    auto config = LoadModelConfig(o.out_dir + "/config.json");
    ASSERT_TRUE(config.ok()) << config.status();
    const int l = config->num_hidden_layers;
    const int64_t h = config->hidden_size, v = config->vocab_size;
    auto ck = Checkpoint::Open(o.out_dir);
    ASSERT_TRUE(ck.ok()) << ck.status();
    EXPECT_TRUE((*ck)->GetChecked(names::Layer(l, names::kMtpEhProj), DType::kBF16, {h, 2 * h}).ok()) << TinyQuantName(q);
    EXPECT_TRUE((*ck)->GetChecked(names::Layer(l, names::kMtpEmbed), DType::kBF16, {v, h}).ok()) << TinyQuantName(q);
    EXPECT_TRUE((*ck)->GetChecked(names::Layer(l, names::kMtpHead), DType::kBF16, {v, h}).ok()) << TinyQuantName(q);
    // The layer's experts are 4-bit: no bf16 weight (AWQ/GPTQ: qweight, NVFP4: a uint8 weight).
    auto expert = (*ck)->Get(names::Expert(l, 0, "down_proj"));
    EXPECT_TRUE(!expert.ok() || expert->dtype == DType::kU8) << TinyQuantName(q);
    const WeightFormat& wf = *config->quant.weight_format;
    EXPECT_FALSE(wf.not_converted.Matches(names::Layer(l, "mlp.experts.0.down_proj")));
    EXPECT_TRUE(wf.not_converted.Matches(ModuleOfWeight(names::Layer(l, names::kMtpEhProj)))) << TinyQuantName(q);
  }
}

TEST(MakeTinyTest, PredictableMtpPassesTheEmbeddingThrough) {
  MakeTinyOptions o;
  o.mtp = true;
  o.predictable = true;
  o.out_dir = testing::TempDir("mtp_predictable");
  ASSERT_TRUE(MakeTinyModel(o).ok());
  auto ck = Checkpoint::Open(o.out_dir);
  ASSERT_TRUE(ck.ok());
  auto eh = (*ck)->Get(names::Layer(3, names::kMtpEhProj));
  ASSERT_TRUE(eh.ok());
  const int64_t h = eh->shape[0];
  ASSERT_EQ(eh->shape[1], 2 * h);
  for (int64_t r = 0; r < h; r += 37) {
    for (int64_t col = 0; col < 2 * h; col += 5) {
      uint16_t bits;
      std::memcpy(&bits, eh->data + 2 * (r * 2 * h + col), 2);
      EXPECT_EQ(Bf16ToFloat(bits), r == col ? 1.0f : 0.0f) << r << "," << col;
    }
  }
  // The head norm is the final norm.
  auto a = (*ck)->Get(names::Layer(3, names::kMtpHeadNorm));
  auto b = (*ck)->Get(names::kFinalNorm);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(std::memcmp(a->data, b->data, static_cast<size_t>(h * 2)), 0);
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
