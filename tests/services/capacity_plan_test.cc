// spar plan's arithmetic: the weights it counts against the tensors a real
// checkpoint holds (make-tiny writes the real names, shapes and dtypes),
// GLM-5's routed experts by hand, the cache block arithmetic and the errors.
// That the cuda backend allocates what it predicts is capacity_plan_gpu_test.
#include "services/common/capacity_plan.h"

#include <gtest/gtest.h>

#include <string>

#include "engine/checkpoint.h"
#include "engine/make_tiny.h"
#include "engine/memory_budget.h"
#include "engine/model_config.h"
#include "tests/engine/test_util.h"  // testing::TempDir

namespace spar {
namespace {

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// What the cuda backend makes of each checkpoint tensor on one rank of a
// TP group, derived from the tensor list rather than from the config: FP8
// values and scales as stored; kv_b as bf16; norms (1-D bf16) as bf16 + fp32;
// the router bias as fp32; heads, experts and MLP columns split by tp.
int64_t StoredBytesFromCheckpoint(const Checkpoint& ck, const ModelConfig& c, int tp) {
  int64_t total = 0;
  for (const std::string& name : ck.Names()) {
    const TensorView t = *ck.Get(name);
    int64_t elements = 1;
    for (int64_t d : t.shape) elements *= d;
    if (Contains(name, "embed_tokens") || Contains(name, "lm_head")) continue;  // counted apart
    if (Contains(name, ".experts.")) {
      // Expert e lives on rank e / (E / tp): rank 0 holds the first E / tp.
      const int e = std::stoi(name.substr(name.find(".experts.") + 9));
      if (e >= c.n_routed_experts / tp) continue;
      total += static_cast<int64_t>(t.nbytes);
      continue;
    }
    if (Contains(name, "shared_experts")) continue;  // padded by tp: the test adds it
    if (Contains(name, "kv_b_proj.weight_scale_inv")) continue;
    if (Contains(name, "kv_b_proj.weight")) {
      total += elements * 2 / tp;
      continue;
    }
    if (t.shape.size() == 1) {
      total += Contains(name, "e_score_correction_bias") ? elements * 4 : elements * 6;
      continue;
    }
    const bool split = Contains(name, "q_b_proj") || Contains(name, "o_proj") || Contains(name, "shared_experts") ||
                       Contains(name, "mlp.gate_proj") || Contains(name, "mlp.up_proj") ||
                       Contains(name, "mlp.down_proj");
    total += split ? static_cast<int64_t>(t.nbytes) / tp : static_cast<int64_t>(t.nbytes);
  }
  return total;
}

// GLM-5-FP8's config: all 78 layers of the real geometry.
MakeTinyOptions Glm5FullOptions() {
  MakeTinyOptions mo;
  mo.geometry = TinyGeometry::kGlm5Full;
  mo.fp8 = true;
  mo.layers = 78;
  return mo;
}

CapacityOptions Big(int tp) {
  CapacityOptions o;
  o.tp = tp;
  o.gpu_memory_bytes = int64_t{80} << 30;
  return o;
}

TEST(CapacityPlanTest, WeightsMatchTheCheckpointsTensors) {
  for (bool fp8 : {false, true}) {
    MakeTinyOptions mo;
    mo.fp8 = fp8;
    mo.out_dir = testing::TempDir(fp8 ? "plan_fp8" : "plan_bf16");
    ASSERT_TRUE(MakeTinyModel(mo).ok());
    auto config = LoadModelConfig(mo.out_dir + "/config.json");
    ASSERT_TRUE(config.ok()) << config.status();
    auto ck = Checkpoint::Open(mo.out_dir);
    ASSERT_TRUE(ck.ok()) << ck.status();
    // TP 1, 2 and 4: 4 heads, 4 experts and 128 MLP columns per rank at TP 4.
    for (int tp : {1, 2, 4}) {
      auto plan = PlanCapacity(*config, Big(tp));
      ASSERT_TRUE(plan.ok()) << plan.status();
      ASSERT_EQ(plan->stages.size(), 1u);
      const StageWeights& w = plan->stages[0].weights;
      const int64_t table = int64_t{320} * 256 * 2;
      EXPECT_EQ(w.embedding, table);
      EXPECT_EQ(w.lm_head, table + 256 * 6);  // + the final norm
      const int64_t layers = w.total() - w.embedding - w.lm_head - w.rope_tables;
      int64_t want = StoredBytesFromCheckpoint(**ck, *config, tp) - 256 * 6;  // final norm is in lm_head
      // The shared expert (192 x 256, two MoE layers): whole at TP 1; its
      // 96 or 48 columns at TP 2 or 4 are not a multiple of 64, so the
      // backend pads them to 128 or 64 in bf16 (UploadMlp).
      const int64_t shared = tp == 1 ? (fp8 ? 3 * (192 * 256 + 2 * 2 * 4) : 3 * 192 * 256 * 2)
                                     : 3 * 256 * (tp == 2 ? 128 : 64) * 2;
      want += 2 * shared;
      EXPECT_EQ(layers, want) << (fp8 ? "fp8" : "bf16") << " TP " << tp;
    }
  }
}

TEST(CapacityPlanTest, Glm5OnTwoNodesOfEightA100s) {
  auto config = TinyModelConfig(Glm5FullOptions());
  ASSERT_TRUE(config.ok());
  CapacityOptions o = Big(8);
  o.stages = 2;
  auto plan = PlanCapacity(*config, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->stages.size(), 2u);
  EXPECT_EQ(plan->stages[1].layers.first, 39);
  // Stage 1: 39 MoE layers x 32 of the 256 experts x (gate, up, down), each
  // 2048 x 6144 FP8 values + 16 x 48 fp32 block scales.
  const int64_t expert = 3 * (int64_t{2048} * 6144 + 16 * 48 * 4);
  EXPECT_EQ(plan->stages[1].weights.routed_experts, 39 * 32 * expert);
  EXPECT_EQ(plan->stages[0].weights.routed_experts, 36 * 32 * expert);
  // Latent row 1152 B (bf16) + indexer 132 B (fp8) per token per layer.
  EXPECT_EQ(plan->stages[1].cache_bytes_per_token, 39 * (1152 + 132));
  EXPECT_EQ(plan->stages[0].activation_reserve_bytes, ActivationReserveBytes(202752));
  for (const StageCapacity& s : plan->stages) {
    const int64_t left = s.budget_bytes - s.runtime_bytes - s.weights.total() - s.activation_reserve_bytes;
    EXPECT_EQ(s.cache_blocks, left / (64 * s.cache_bytes_per_token));
    EXPECT_GT(s.cache_bytes(), int64_t{10} << 30);  // GLM-5 fits with room to serve
  }
  EXPECT_EQ(plan->cache_tokens(), std::min(plan->stages[0].cache_tokens(), plan->stages[1].cache_tokens()));
  EXPECT_EQ(plan->SequencesAt(131072), plan->cache_tokens() / 131072);
  EXPECT_EQ(plan->SequencesAt(100), plan->cache_tokens() / 128);  // whole blocks
  const std::string table = FormatCapacityPlan(*config, o, *plan, {8192, 1 << 20});
  EXPECT_TRUE(Contains(table, "2 stage(s) x TP 8 = 16 GPUs")) << table;
  EXPECT_TRUE(Contains(table, "1048576 tokens is beyond max model len")) << table;
}

// Issue 24: GLM-5 with 4-bit routed experts on one 8 x A100-80GB node.
TEST(CapacityPlanTest, Glm5FitsOneNodeOfEightA100sWith4BitExperts) {
  MakeTinyOptions mo = Glm5FullOptions();
  mo.fp8 = false;
  for (const char* quant : {"int4", "nvfp4"}) {
    auto config = TinyModelConfig(mo);
    ASSERT_TRUE(config.ok());
    auto format = Glm5ExpertsOnly4Bit(quant);
    ASSERT_TRUE(format.ok()) << format.status();
    config->quant.weight_format = *format;
    CapacityOptions o = Big(8);
    // The whole 202752-token context does not fit next to the weights ...
    EXPECT_FALSE(PlanCapacity(*config, o).ok()) << quant;
    // ... a context of ~100K tokens does.
    const int64_t longest = LongestServableContext(*config, o);
    EXPECT_GT(longest, 90000) << quant;
    EXPECT_EQ(longest % 64, 0);
    o.max_model_len = longest;
    auto plan = PlanCapacity(*config, o);
    ASSERT_TRUE(plan.ok()) << quant << ": " << plan.status();
    EXPECT_GE(plan->cache_tokens(), longest);
    o.max_model_len = longest + 64;
    EXPECT_FALSE(PlanCapacity(*config, o).ok()) << quant;
    // 75 MoE layers x 32 experts per GPU x (gate+up as one SiLU pair, down)
    // in the W4A16 kernel's layout: codes + fp32 scale and uint8 zero per
    // 128 (int4), or codes + an e4m3 scale per 16 + the global scale (nvfp4).
    const bool fp4 = std::string(quant) == "nvfp4";
    const int64_t expert = fp4 ? (4096 * 3072 + 4096 * 384 + 4) + (6144 * 1024 + 6144 * 128 + 4)
                               : (4096 * 3072 + 4096 * 48 * 5) + (6144 * 1024 + 6144 * 16 * 5);
    EXPECT_EQ(plan->stages[0].weights.routed_experts, 75 * 32 * expert) << quant;
    const std::string table = FormatCapacityPlan(*config, o, *plan, {8192, 32768});
    EXPECT_TRUE(Contains(table, "1 stage(s) x TP 8 = 8 GPUs")) << table;
    EXPECT_TRUE(Contains(table, fp4 ? "NVFP4" : "AWQ (int4, group 128")) << table;
    std::cout << quant << ": GLM-5 on 8 x A100-80GB, max model len " << longest << ", " << plan->cache_tokens()
              << " KV tokens, " << plan->stages[0].weights.total() / double(1 << 30) << " GiB of weights per GPU\n";
  }
  EXPECT_FALSE(Glm5ExpertsOnly4Bit("int8").ok());
}

// A 4-bit checkpoint's own config: the routed experts of the tiny AWQ model
// in the kernel layout (gate+up as a SiLU pair, group 64).
TEST(CapacityPlanTest, FourBitCheckpointCountsTheKernelLayout) {
  MakeTinyOptions mo;
  mo.quant = TinyQuant::kAwq;
  auto config = TinyModelConfig(mo);
  ASSERT_TRUE(config.ok());
  auto plan = PlanCapacity(*config, Big(1));
  ASSERT_TRUE(plan.ok()) << plan.status();
  // 2 MoE layers x 16 experts x (pair 384 x 256, down 256 x 192), rows padded to 64.
  const int64_t expert = (384 * 128 + 384 * 4 * 5) + (256 * 96 + 256 * 3 * 5);
  EXPECT_EQ(plan->stages[0].weights.routed_experts, 2 * 16 * expert);
  // AWQ keeps the indexer unconverted: bf16, like the bf16 model's.
  MakeTinyOptions bo;
  auto bf16 = PlanCapacity(*TinyModelConfig(bo), Big(1));
  ASSERT_TRUE(bf16.ok());
  EXPECT_EQ(plan->stages[0].weights.indexer, bf16->stages[0].weights.indexer);
  EXPECT_LT(plan->stages[0].weights.attention, bf16->stages[0].weights.attention);
}

TEST(CapacityPlanTest, BalancedSplitGivesTheSmallestStageMoreCache) {
  auto config = TinyModelConfig(Glm5FullOptions());
  ASSERT_TRUE(config.ok());
  CapacityOptions o = Big(8);
  o.stages = 2;
  auto even = PlanCapacity(*config, o);
  ASSERT_TRUE(even.ok());
  auto balanced = BalancedStageLayers(*config, o);
  ASSERT_TRUE(balanced.ok()) << balanced.status();
  EXPECT_EQ(FormatStageLayers(*balanced), "0:40,40:78");
  o.stage_layers = *balanced;
  auto plan = PlanCapacity(*config, o);
  ASSERT_TRUE(plan.ok());
  EXPECT_GT(plan->cache_tokens(), even->cache_tokens());
  // No neighbour of the result is better: one layer either way shrinks the smaller stage.
  for (const std::vector<LayerRange>& n : {std::vector<LayerRange>{{0, 39}, {39, 78}},
                                           std::vector<LayerRange>{{0, 41}, {41, 78}}}) {
    o.stage_layers = n;
    EXPECT_LT(PlanCapacity(*config, o)->cache_tokens(), plan->cache_tokens()) << FormatStageLayers(n);
  }

  // Shared indexers (GLM-5.2 style, a full indexer every 4th layer): a stage
  // never starts on an S layer. The even split moves down to 36; the balance
  // steps over the S layers 37-39 to 40.
  MakeTinyOptions shared = Glm5FullOptions();
  for (int l = 0; l < 78; ++l) shared.indexer_pattern += l % 4 == 0 ? 'F' : 'S';
  auto sc = TinyModelConfig(shared);
  ASSERT_TRUE(sc.ok()) << sc.status();
  CapacityOptions so = Big(8);
  so.stages = 2;
  auto even_shared = PlanCapacity(*sc, so);
  ASSERT_TRUE(even_shared.ok()) << even_shared.status();
  EXPECT_EQ(even_shared->stages[1].layers.first, 36);
  auto split = BalancedStageLayers(*sc, so);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(FormatStageLayers(*split), "0:40,40:78");
  so.stage_layers = *split;
  EXPECT_GT(PlanCapacity(*sc, so)->cache_tokens(), even_shared->cache_tokens());

  // One stage: nothing to move.
  CapacityOptions one = Big(8);
  one.gpu_memory_bytes = int64_t{141} << 30;
  auto single = BalancedStageLayers(*config, one);
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(FormatStageLayers(*single), "0:78");
}

TEST(CapacityPlanTest, ErrorsNameTheProblem) {
  auto config = TinyModelConfig(Glm5FullOptions());
  ASSERT_TRUE(config.ok());
  auto bad_tp = PlanCapacity(*config, Big(3));
  EXPECT_EQ(bad_tp.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(std::string(bad_tp.status().message()), "attention heads")) << bad_tp.status();
  // One node of 8: ~92 GiB of weights per GPU.
  auto one_node = PlanCapacity(*config, Big(8));
  EXPECT_EQ(one_node.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(std::string(one_node.status().message()), "does not fit")) << one_node.status();
  CapacityOptions o = Big(8);
  o.stages = 2;
  o.max_model_len = 300000;
  EXPECT_TRUE(Contains(std::string(PlanCapacity(*config, o).status().message()), "max model len"));
  o.max_model_len = 0;
  o.gpu_memory_utilization = 1.5;
  EXPECT_EQ(PlanCapacity(*config, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.gpu_memory_utilization = 0.9;
  o.stage_layers = {{0, 40}, {41, 78}};
  EXPECT_TRUE(Contains(std::string(PlanCapacity(*config, o).status().message()), "not contiguous"));
  o.stage_layers = {{0, 40}, {40, 70}};
  EXPECT_TRUE(Contains(std::string(PlanCapacity(*config, o).status().message()), "the model has 78"));
}

}  // namespace
}  // namespace spar
