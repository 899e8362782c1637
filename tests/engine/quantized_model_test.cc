// The 4-bit checkpoints end to end on the cpu backend: make-tiny writes each
// layout, and the engine on it must equal — bit for bit — the engine on the
// same checkpoint dequantized by the independent reader of
// dequantized_copy.h (logits, indexer selections, greedy tokens). That
// proves the loading: names, axes, zero-point conventions, what the config
// keeps unconverted. Plus the loader's refusals and the slices the cuda
// backend repacks.
#include <functional>
#include <map>

#include "absl/strings/match.h"
#include "base/mapped_file.h"
#include "base/rng.h"
#include "engine/engine.h"
#include "engine/make_tiny.h"
#include "engine/matrix_source.h"
#include "engine/weight_convert.h"
#include "engine/weight_names.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/dequantized_copy.h"
#include "tests/engine/greedy_requests.h"
#include "tests/engine/test_util.h"

namespace spar {
namespace {

using nlohmann::json;
using testing::GreedyRequests;

struct QuantCase {
  const char* name;
  ModelArch arch;
  TinyQuant quant;
  int min_modules;  // packed modules the checkpoint must hold
};

std::string MakeQuantModel(const QuantCase& c, const std::string& prefix, uint64_t seed = 0) {
  MakeTinyOptions o;
  o.arch = c.arch;
  o.quant = c.quant;
  o.seed = seed;
  o.out_dir = testing::TempDir(prefix + c.name);
  const absl::Status s = MakeTinyModel(o);
  EXPECT_TRUE(s.ok()) << s;
  return o.out_dir;
}

std::unique_ptr<Engine> CpuEngine(const std::string& dir) {
  EngineOptions eo;
  eo.model.num_blocks = 64;
  auto e = Engine::Create(dir, eo);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

std::vector<int32_t> Prompt(int n, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> p(n);
  for (auto& t : p) t = static_cast<int32_t>(rng.Below(288));
  return p;
}

class QuantizedModelTest : public ::testing::TestWithParam<QuantCase> {};

TEST_P(QuantizedModelTest, EqualsItsDequantizedCopy) {
  const QuantCase c = GetParam();
  const std::string dir = MakeQuantModel(c, "q_");
  const std::string plain = testing::TempDir(std::string("q_plain_") + c.name);
  const auto stats = testing::WriteDequantizedCopy(dir, plain);
  EXPECT_GE(stats.modules, c.min_modules) << "the checkpoint should hold that many 4-bit modules";
  auto packed = CpuEngine(dir);
  auto reference = CpuEngine(plain);
  ASSERT_TRUE(packed && reference);
  ASSERT_TRUE(packed->config().quant.weight_format.has_value());
  ASSERT_FALSE(reference->config().quant.weight_format.has_value());
  // 70 and 90 tokens: past index_topk (32), so the sparse path runs.
  const std::vector<std::vector<int32_t>> prompts = {Prompt(70, 1), Prompt(9, 2), Prompt(90, 3)};
  for (const auto& p : prompts) {
    ForwardTrace ta, tb;
    std::vector<std::vector<int32_t>> tables_a, tables_b;
    auto a = packed->PromptLogits({p}, 4, &ta, &tables_a);
    auto b = reference->PromptLogits({p}, 4, &tb, &tables_b);
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
    // The same fp32 weights, the same ops: identical, not merely close.
    EXPECT_EQ(*a, *b) << c.name << ": prompt of " << p.size();
    EXPECT_EQ(ta.topk_slots, tb.topk_slots) << c.name;
  }
  const std::vector<GenerationRequest> reqs = GreedyRequests(prompts, 12);
  auto ga = packed->Generate(reqs);
  auto gb = reference->Generate(reqs);
  ASSERT_TRUE(ga.ok() && gb.ok());
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_EQ((*ga)[i].tokens.size(), (*gb)[i].tokens.size());
    for (size_t t = 0; t < (*ga)[i].tokens.size(); ++t) EXPECT_EQ((*ga)[i].tokens[t].id, (*gb)[i].tokens[t].id);
  }
}

// Quantization must change the model (else the test above proves nothing
// about dequantization): the bf16 model of the same seed differs.
TEST_P(QuantizedModelTest, DiffersFromTheBf16Model) {
  const QuantCase c = GetParam();
  auto packed = CpuEngine(MakeQuantModel(c, "qd_"));
  MakeTinyOptions o;
  o.arch = c.arch;
  o.out_dir = testing::TempDir(std::string("qd_bf16_") + c.name);
  ASSERT_TRUE(MakeTinyModel(o).ok());
  auto bf16 = CpuEngine(o.out_dir);
  ASSERT_TRUE(packed && bf16);
  auto a = packed->PromptLogits({Prompt(20, 4)}, 1);
  auto b = bf16->PromptLogits({Prompt(20, 4)}, 1);
  ASSERT_TRUE(a.ok() && b.ok());
  double diff = 0, scale = 0;
  for (size_t v = 0; v < (*a)[0][0].size(); ++v) {
    diff = std::max<double>(diff, std::fabs((*a)[0][0][v] - (*b)[0][0][v]));
    scale = std::max<double>(scale, std::fabs((*b)[0][0][v]));
  }
  EXPECT_GT(diff, 1e-3 * scale) << c.name;
  EXPECT_LT(diff, 0.5 * scale) << c.name << ": 4-bit should stay near its bf16 source";
}

INSTANTIATE_TEST_SUITE_P(
    Formats, QuantizedModelTest,
    ::testing::Values(QuantCase{"glm5_awq", ModelArch::kGlmMoeDsa, TinyQuant::kAwq, 100},
                      QuantCase{"glm5_gptq", ModelArch::kGlmMoeDsa, TinyQuant::kGptq, 100},
                      QuantCase{"glm5_int4_ct", ModelArch::kGlmMoeDsa, TinyQuant::kInt4Ct, 100},
                      QuantCase{"glm5_nvfp4", ModelArch::kGlmMoeDsa, TinyQuant::kNvfp4, 100},
                      QuantCase{"dsv32_awq", ModelArch::kDeepseekV32, TinyQuant::kAwq, 100}),
    [](const auto& info) { return std::string(info.param.name); });

// What each tiny config keeps unconverted is stored plain, the rest packed.
TEST(QuantizedModelLayout, ConvertedModulesFollowTheConfig) {
  struct Expect {
    TinyQuant quant;
    std::vector<std::string> plain, packed_suffix;
  };
  const std::vector<Expect> cases = {
      {TinyQuant::kAwq, {"model.layers.1.self_attn.indexer.wq_b.weight", "lm_head.weight"}, {".qweight", ".qzeros", ".scales"}},
      {TinyQuant::kGptq, {"lm_head.weight"}, {".qweight", ".qzeros", ".scales", ".g_idx"}},
      {TinyQuant::kInt4Ct, {"model.layers.1.self_attn.indexer.wk.weight", "lm_head.weight"}, {".weight_packed", ".weight_scale", ".weight_shape"}},
      {TinyQuant::kNvfp4, {"model.layers.0.self_attn.q_a_proj.weight", "model.layers.2.self_attn.indexer.wk.weight", "lm_head.weight"},
       {".weight", ".weight_scale", ".weight_scale_2", ".input_scale"}},
  };
  for (const Expect& e : cases) {
    const std::string dir = MakeQuantModel({"layout", ModelArch::kGlmMoeDsa, e.quant, 0}, std::string("ql_") + std::string(TinyQuantName(e.quant)));
    auto ck = Checkpoint::Open(dir);
    ASSERT_TRUE(ck.ok()) << ck.status();
    for (const auto& name : e.plain) {
      auto t = (*ck)->Get(name);
      ASSERT_TRUE(t.ok()) << name;
      EXPECT_EQ(t->dtype, DType::kBF16) << name;
    }
    // The router and the embedding are never converted.
    EXPECT_EQ((*ck)->Get("model.layers.1.mlp.gate.weight")->dtype, DType::kBF16);
    EXPECT_EQ((*ck)->Get(names::kEmbed)->dtype, DType::kBF16);
    for (const auto& suffix : e.packed_suffix) {
      EXPECT_TRUE((*ck)->Has("model.layers.1.mlp.experts.3.down_proj" + suffix)) << suffix;
    }
  }
  // compressed-tensors: experts symmetric (no zero point), attention per
  // channel with zero points.
  const std::string ct = MakeQuantModel({"ct", ModelArch::kGlmMoeDsa, TinyQuant::kInt4Ct, 0}, "ql_ct_");
  auto ck = Checkpoint::Open(ct);
  ASSERT_TRUE(ck.ok());
  EXPECT_FALSE((*ck)->Has("model.layers.1.mlp.experts.3.down_proj.weight_zero_point"));
  EXPECT_TRUE((*ck)->Has("model.layers.1.self_attn.o_proj.weight_zero_point"));
  EXPECT_EQ((*ck)->Get("model.layers.1.self_attn.o_proj.weight_scale")->shape, (std::vector<int64_t>{256, 1}));
}

// ---- the loader's refusals ----

// Copies a checkpoint, letting `edit` change a tensor's bytes (or drop it by
// clearing them) and `edit_config` change config.json.
std::string EditedCopy(const std::string& src, const std::string& name,
                       const std::function<void(const std::string&, std::string&)>& edit,
                       const std::function<void(json&)>& edit_config) {
  const std::string dst = testing::TempDir(name);
  auto ck = Checkpoint::Open(src);
  EXPECT_TRUE(ck.ok());
  CheckpointWriter out;
  for (const std::string& n : (*ck)->Names()) {
    auto t = (*ck)->Get(n);
    std::string bytes(reinterpret_cast<const char*>(t->data), t->nbytes);
    edit(n, bytes);
    if (!bytes.empty()) {
      EXPECT_TRUE(out.AddBytes(n, t->dtype, t->shape, bytes).ok());
    }
  }
  EXPECT_TRUE(out.Write(dst).ok());
  json c = json::parse(*ReadFileToString(src + "/config.json"));
  edit_config(c);
  EXPECT_TRUE(WriteStringToFile(dst + "/config.json", c.dump()).ok());
  return dst;
}

void ExpectLoadFails(const std::string& dir, const std::string& must_mention) {
  EngineOptions eo;
  eo.model.num_blocks = 8;
  auto e = Engine::Create(dir, eo);
  ASSERT_FALSE(e.ok()) << "expected: " << must_mention;
  EXPECT_NE(e.status().message().find(must_mention), std::string::npos) << e.status();
}

const auto kNoEdit = [](const std::string&, std::string&) {};
const auto kNoConfigEdit = [](json&) {};

TEST(QuantizedModelErrors, ConfigAndTensorsMustAgree) {
  const std::string awq = MakeQuantModel({"err", ModelArch::kGlmMoeDsa, TinyQuant::kAwq, 0}, "qe_awq_");
  // The config keeps the experts unconverted, the checkpoint packs them.
  ExpectLoadFails(EditedCopy(awq, "qe_keep", kNoEdit,
                             [](json& c) { c["quantization_config"]["modules_to_not_convert"].push_back("mlp.experts"); }),
                  "keeps \"model.layers.1.mlp.experts.0.gate_proj\" unconverted");
  // Packed tensors without a 4-bit config.
  ExpectLoadFails(EditedCopy(awq, "qe_noconf", kNoEdit, [](json& c) { c.erase("quantization_config"); }),
                  "has no 4-bit quantization_config");
  // AWQ tensors read as GPTQ: qweight's axes do not match.
  ExpectLoadFails(EditedCopy(awq, "qe_asgptq", kNoEdit,
                             [](json& c) {
                               c["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 64},
                                                           {"desc_act", false}, {"sym", true}};
                             }),
                  "GPTQ qweight [K/8, N]");
  // A group size that does not divide a layer's input width.
  ExpectLoadFails(EditedCopy(awq, "qe_group", kNoEdit, [](json& c) { c["quantization_config"]["group_size"] = 96; }),
                  "group size 96 does not divide its 256 input features");
  // A missing zero-point tensor.
  ExpectLoadFails(EditedCopy(awq, "qe_nozeros",
                             [](const std::string& n, std::string& b) {
                               if (n == "model.layers.1.mlp.experts.2.up_proj.qzeros") b.clear();
                             },
                             kNoConfigEdit),
                  "model.layers.1.mlp.experts.2.up_proj.qzeros");
  // A module with neither form stored.
  ExpectLoadFails(EditedCopy(awq, "qe_missing",
                             [](const std::string& n, std::string& b) {
                               if (n == "model.layers.1.mlp.experts.0.up_proj.qweight") b.clear();
                             },
                             kNoConfigEdit),
                  "model.layers.1.mlp.experts.0.up_proj.weight");

  const std::string gptq = MakeQuantModel({"err", ModelArch::kGlmMoeDsa, TinyQuant::kGptq, 0}, "qe_gptq_");
  // A permuted g_idx is act-order.
  ExpectLoadFails(EditedCopy(gptq, "qe_gidx",
                             [](const std::string& n, std::string& b) {
                               if (n == "model.layers.0.mlp.down_proj.g_idx") std::swap(b[0], b[4 * 100]);
                             },
                             kNoConfigEdit),
                  "act-order");

  const std::string ct = MakeQuantModel({"err", ModelArch::kGlmMoeDsa, TinyQuant::kInt4Ct, 0}, "qe_ct_");
  // weight_shape is checked against the model's shape.
  ExpectLoadFails(EditedCopy(ct, "qe_shape",
                             [](const std::string& n, std::string& b) {
                               if (n == "model.layers.1.self_attn.o_proj.weight_shape") b[0] ^= 1;
                             },
                             kNoConfigEdit),
                  "o_proj.weight_shape\" says");
  // A symmetric group must not come with zero points.
  ExpectLoadFails(EditedCopy(ct, "qe_sym", kNoEdit,
                             [](json& c) {
                               c["quantization_config"]["config_groups"]["group_1"]["weights"]["symmetric"] = true;
                             }),
                  "weight_zero_point\" is stored, but the config group is symmetric");

  const std::string fp4 = MakeQuantModel({"err", ModelArch::kGlmMoeDsa, TinyQuant::kNvfp4, 0}, "qe_fp4_");
  // A non-positive global scale.
  ExpectLoadFails(EditedCopy(fp4, "qe_global",
                             [](const std::string& n, std::string& b) {
                               if (n == "model.layers.1.mlp.experts.0.up_proj.weight_scale_2") {
                                 const float zero = 0.0f;
                                 std::memcpy(b.data(), &zero, 4);
                               }
                             },
                             kNoConfigEdit),
                  "weight_scale_2\" is 0");
}

// q_b and the indexer's wq_b are stacked into one GEMM only where they are
// stored alike (IndexerQueryGemm::kWithQb, the default of
// ModelOptions::indexer_query): what each tiny config converts decides it.
TEST(QuantizedModelLayout, SameWeightFormatFollowsTheStoredForms) {
  struct Expect {
    TinyQuant quant;
    bool query_weights_alike;  // q_b and indexer.wq_b
  };
  for (const Expect& e : {Expect{TinyQuant::kAwq, false}, Expect{TinyQuant::kGptq, true},
                          Expect{TinyQuant::kNvfp4, false}}) {
    const std::string dir = MakeQuantModel({"alike", ModelArch::kGlmMoeDsa, e.quant, 0},
                                           std::string("qa_") + std::string(TinyQuantName(e.quant)));
    auto config = LoadModelConfig(dir + "/config.json");
    ASSERT_TRUE(config.ok()) << config.status();
    auto ck = Checkpoint::Open(dir);
    ASSERT_TRUE(ck.ok()) << ck.status();
    const ModelConfig& c = *config;
    auto q_b = LoadMatrixSource(**ck, c.quant, "model.layers.1.self_attn.q_b_proj.weight",
                                c.num_attention_heads * c.qk_head_dim(), c.q_lora_rank);
    auto wq_b = LoadMatrixSource(**ck, c.quant, "model.layers.1.self_attn.indexer.wq_b.weight",
                                 static_cast<int64_t>(c.index_n_heads) * c.index_head_dim, c.q_lora_rank);
    auto o = LoadMatrixSource(**ck, c.quant, "model.layers.1.self_attn.o_proj.weight", c.hidden_size,
                              c.num_attention_heads * c.v_head_dim);
    ASSERT_TRUE(q_b.ok() && wq_b.ok() && o.ok()) << TinyQuantName(e.quant);
    EXPECT_EQ(SameWeightFormat(*q_b, *wq_b), e.query_weights_alike) << TinyQuantName(e.quant);
    EXPECT_EQ(SameWeightFormat(*wq_b, *q_b), e.query_weights_alike) << TinyQuantName(e.quant);
    EXPECT_TRUE(SameWeightFormat(*q_b, *q_b));
    // Same layout and columns, another group size: not alike.
    if (q_b->quant.has_value() && e.quant != TinyQuant::kNvfp4) {
      MatrixSource regrouped = *q_b;
      regrouped.quant->group_size = q_b->quant->GroupFor(q_b->cols()) / 2;
      EXPECT_FALSE(SameWeightFormat(*q_b, regrouped));
    }
    // A plain matrix beside a 4-bit one: never.
    if (q_b->quant.has_value() != o->quant.has_value()) {
      EXPECT_FALSE(SameWeightFormat(*q_b, *o));
    }
  }
  // NVFP4: another global scale cannot share one packing.
  const std::string fp4 = MakeQuantModel({"alike", ModelArch::kGlmMoeDsa, TinyQuant::kNvfp4, 0}, "qa_fp4_scale");
  auto config = LoadModelConfig(fp4 + "/config.json");
  ASSERT_TRUE(config.ok());
  auto ck = Checkpoint::Open(fp4);
  ASSERT_TRUE(ck.ok());
  auto down = LoadMatrixSource(**ck, config->quant, "model.layers.1.mlp.experts.3.down_proj.weight",
                               config->hidden_size, config->moe_intermediate_size);
  ASSERT_TRUE(down.ok()) << down.status();
  ASSERT_TRUE(down->quant.has_value());
  MatrixSource rescaled = *down;
  rescaled.global_scale = down->global_scale * 2.0f;
  EXPECT_TRUE(SameWeightFormat(*down, *down));
  EXPECT_FALSE(SameWeightFormat(*down, rescaled));
}

// ---- slices for the cuda backend's repack ----

TEST(QuantizedMatrixSlices, Int4AndNvfp4SlicesEqualTheFloatSlices) {
  for (TinyQuant q : {TinyQuant::kAwq, TinyQuant::kGptq, TinyQuant::kInt4Ct, TinyQuant::kNvfp4}) {
    const std::string dir = MakeQuantModel({"slice", ModelArch::kGlmMoeDsa, q, 0}, std::string("qs_") + std::string(TinyQuantName(q)));
    auto config = LoadModelConfig(dir + "/config.json");
    ASSERT_TRUE(config.ok()) << config.status();
    auto ck = Checkpoint::Open(dir);
    ASSERT_TRUE(ck.ok());
    // o_proj [256, 4096] (per channel in int4-ct), a shared expert's down [256, 192].
    for (const auto& [name, rows, cols] : {std::tuple<std::string, int64_t, int64_t>{"model.layers.1.self_attn.o_proj.weight", 256, 4096},
                                           {"model.layers.1.mlp.shared_experts.down_proj.weight", 256, 192}}) {
      auto m = LoadMatrixSource(**ck, config->quant, name, rows, cols);
      ASSERT_TRUE(m.ok()) << m.status();
      ASSERT_TRUE(m->quant.has_value()) << name;
      struct Slice {
        int64_t r0, r1, c0, c1;
      };
      for (const Slice& s : {Slice{0, -1, 0, -1}, Slice{64, 128, 0, -1}, Slice{0, -1, 64, 128}, Slice{8, 40, 0, 64}}) {
        MatrixSource part = *m;
        part.row_begin = s.r0;
        part.row_end = s.r1;
        part.col_begin = s.c0;
        part.col_end = s.c1;
        auto f = MatrixToFloat(part);
        ASSERT_TRUE(f.ok()) << f.status();
        ASSERT_EQ(f->size(), static_cast<size_t>(part.rows() * part.cols()));
        std::vector<float> g(f->size());
        if (q == TinyQuant::kNvfp4) {
          auto w = MatrixToNvfp4(part);
          ASSERT_TRUE(w.ok()) << w.status();
          ref::DequantizeNvfp4(*w, 0, w->rows, g.data());
        } else {
          auto w = MatrixToInt4(part);
          ASSERT_TRUE(w.ok()) << w.status();
          ASSERT_EQ(w->cols, part.cols());
          ref::DequantizeInt4(*w, 0, w->rows, g.data());
        }
        EXPECT_EQ(*f, g) << name << " rows [" << s.r0 << ", " << s.r1 << ") cols [" << s.c0 << ", " << s.c1 << ")";
      }
      // A column range that splits groups: the float path still works, the
      // repack path says why it cannot.
      MatrixSource split = *m;
      split.col_begin = 8;
      split.col_end = 40;
      EXPECT_TRUE(MatrixToFloat(split).ok());
      // int4-ct's second config group (attention, shared experts) is per channel.
      const bool per_channel = q == TinyQuant::kInt4Ct;
      if (q == TinyQuant::kNvfp4) {
        EXPECT_EQ(MatrixToNvfp4(split).status().code(), absl::StatusCode::kFailedPrecondition);
      } else if (!per_channel) {
        EXPECT_EQ(MatrixToInt4(split).status().code(), absl::StatusCode::kFailedPrecondition);
      } else {
        EXPECT_TRUE(MatrixToInt4(split).ok());  // one group per row survives any column slice
      }
    }
  }
}

}  // namespace
}  // namespace spar
