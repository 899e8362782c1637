// `spar plan`: whether a model fits a set of GPUs before any is rented, and
// how many tokens of KV cache each pipeline stage would hold. Pure arithmetic
// over config.json (no weights needed), mirroring what the cuda backend
// allocates: block-FP8 weights stay FP8 with their fp32 128x128 scales,
// kv_b becomes bf16 (the absorbed MLA projections), norms are kept in bf16
// and fp32, a tensor-parallel rank holds its heads, its routed experts and
// its column slice of the dense and shared MLPs (engine/model.cc), and the
// caches are replicated on every rank. The numbers are checked against a
// loaded engine on a GPU (capacity_plan_gpu_test).
#ifndef SPAR_SERVICES_COMMON_CAPACITY_PLAN_H_
#define SPAR_SERVICES_COMMON_CAPACITY_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model_config.h"
#include "base/cache_layout.h"
#include "services/common/layer_split.h"

namespace spar {

struct CapacityOptions {
  int tp = 1;      // GPUs per stage (tensor and expert parallel)
  int stages = 1;  // pipeline stages, layers split as the scheduler splits them
  std::vector<LayerRange> stage_layers;  // instead: explicit ranges (--stage-layers)
  int64_t gpu_memory_bytes = 0;
  double gpu_memory_utilization = 0.9;
  // In use before the first weight: CUDA context, streams, NCCL buffers.
  int64_t runtime_bytes = int64_t{1} << 30;
  int64_t max_model_len = 0;  // 0: the model's max_position_embeddings
  // The cuda backend's formats (--kv-cache-dtype, --indexer-cache-dtype;
  // default: its auto, engine/cache_formats.h).
  LatentFormat latent_format = LatentFormat::kBF16;
  IndexerFormat indexer_format = IndexerFormat::kFp8;
};

// Weight bytes on one GPU of a stage, by what they are.
struct StageWeights {
  int64_t attention = 0;  // MLA projections (q_a, kv_a, q_b, kv_b as bf16, o_proj) and their norms
  int64_t indexer = 0;    // wq_b, wk, weights_proj, k_norm (replicated on every rank)
  int64_t dense_mlp = 0;  // the first dense layers' MLPs and the shared experts
  int64_t routed_experts = 0;
  int64_t router = 0;
  int64_t embedding = 0;  // first stage
  int64_t lm_head = 0;    // last stage, with the final norm
  int64_t rope_tables = 0;
  int64_t total() const {
    return attention + indexer + dense_mlp + routed_experts + router + embedding + lm_head + rope_tables;
  }
};

struct StageCapacity {
  LayerRange layers;
  StageWeights weights;                // per GPU
  int64_t budget_bytes = 0;            // utilization x GPU memory
  int64_t runtime_bytes = 0;
  int64_t activation_reserve_bytes = 0;
  int64_t cache_bytes_per_token = 0;   // all of the stage's layers, per GPU
  int64_t cache_blocks = 0;            // 64 tokens each; <= 0: does not fit
  // What the budget leaves for the cache (negative: the stage does not fit).
  int64_t cache_budget_bytes() const {
    return budget_bytes - runtime_bytes - weights.total() - activation_reserve_bytes;
  }
  int64_t cache_tokens() const { return cache_blocks * 64; }
  int64_t cache_bytes() const { return cache_blocks * 64 * cache_bytes_per_token; }
};

struct CapacityPlan {
  int64_t max_model_len = 0;
  std::vector<StageCapacity> stages;
  // Tokens of KV cache the whole pipeline holds: every stage holds every
  // token of every sequence, so the smallest stage decides.
  int64_t cache_tokens() const;
  // Sequences of `context` tokens that fit at once (whole 64-token blocks).
  int64_t SequencesAt(int64_t context) const;
};

// Fails, naming the problem, when the split does not divide the model
// (heads, experts, MLP columns by tp; layers by stages) or a stage's weights
// and reserve leave no room for a single cache block.
absl::StatusOr<CapacityPlan> PlanCapacity(const ModelConfig& config, const CapacityOptions& options);

// The longest max model len (a multiple of 64, at most the model's context)
// with which PlanCapacity succeeds, or 0 when even 64 tokens do not fit
// (a shorter context also shrinks the activation reserve).
int64_t LongestServableContext(const ModelConfig& config, const CapacityOptions& options);

// The stage layer ranges that give the smallest stage the most KV cache
// (the even split gives the first stage the cheap dense layers and the
// embedding, the last the head): pass them as --stage-layers to the
// scheduler and the workers. Starts from the even split.
absl::StatusOr<std::vector<LayerRange>> BalancedStageLayers(const ModelConfig& config, const CapacityOptions& options);

// GLM-5 with 4-bit routed experts and everything else bf16 ("int4": AWQ's
// layout, group 128, as the AWQ / GPTQ / compressed-tensors W4A16 GLM-5
// checkpoints use; "nvfp4": ModelOpt's): the layout of the experts-only
// checkpoints (the published GLM-5.2 NVFP4 experts-only one), the most bf16
// of the published 4-bit GLM-5 checkpoints, so a node that fits it fits the
// others. `spar plan --geometry glm5-full --quant ...` plans it; a real
// checkpoint's own list is planned with --model DIR.
absl::StatusOr<WeightFormat> Glm5ExpertsOnly4Bit(absl::string_view quant);

// The plan as a table for people.
std::string FormatCapacityPlan(const ModelConfig& config, const CapacityOptions& options, const CapacityPlan& plan,
                               const std::vector<int64_t>& contexts);

}  // namespace spar

#endif  // SPAR_SERVICES_COMMON_CAPACITY_PLAN_H_
