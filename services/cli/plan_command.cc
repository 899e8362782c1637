// spar plan (--model DIR | --geometry glm5-full [--quant int4|nvfp4]) [--tp N] [--stages N | --stage-layers A:B,B:C]
//           [--gpu-memory-gib G] [--gpu-memory-utilization F] [--max-model-len N]
//           [--runtime-overhead-gib G] [--contexts 8192,32768,131072]
//           [--kv-cache-dtype auto|bf16|fp8] [--indexer-cache-dtype auto|fp8|bf16]
// Whether a model fits the GPUs before any is rented, and how many tokens of
// KV cache each pipeline stage holds: reads only config.json.
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/make_tiny.h"
#include "services/cli/commands.h"
#include "services/common/args.h"
#include "services/common/cache_flags.h"
#include "services/common/capacity_plan.h"

namespace spar {
int RunPlan(int argc, char** argv) {
  std::string model, geometry, stage_layers, quant, contexts_flag = "8192,32768,131072";
  int64_t tp = 1, stages = 1, max_model_len = 0, layers = 0;
  double gpu_memory_gib = 80, utilization = 0.9, runtime_gib = 1.0;
  ArgParser args("plan");
  args.AddString("model", &model, "model directory (only its config.json is read)");
  args.AddString("geometry", &geometry, "instead of --model: glm5-full (GLM-5-FP8's config)");
  args.AddInt("layers", &layers, "with --geometry: decoder layers (default 78, the real model)");
  args.AddString("quant", &quant,
                 "with --geometry: 4-bit routed experts, int4 (AWQ/GPTQ/compressed-tensors, group 128) or nvfp4, "
                 "instead of GLM-5-FP8's block-FP8 (a checkpoint's own layout: --model DIR)");
  args.AddInt("tp", &tp, "GPUs per pipeline stage (tensor and expert parallel)");
  args.AddInt("stages", &stages, "pipeline stages (nodes), layers split evenly as the scheduler does");
  args.AddString("stage-layers", &stage_layers, "instead of --stages: layer ranges, e.g. 0:40,40:78 (the scheduler's flag)");
  args.AddDouble("gpu-memory-gib", &gpu_memory_gib, "memory of one GPU in GiB (80: A100-80GB)");
  args.AddDouble("gpu-memory-utilization", &utilization, "fraction of each GPU spar may use, as the workers' flag");
  args.AddInt("max-model-len", &max_model_len, "longest sequence served (default: the model's context)");
  args.AddDouble("runtime-overhead-gib", &runtime_gib, "memory in use before the weights: CUDA context, NCCL");
  args.AddString("contexts", &contexts_flag, "context lengths to count sequences at, comma separated");
  CacheDtypeFlags cache_flags;
  cache_flags.Register(&args);
  if (auto code = args.ParseOrExitCode(argc, argv, 2)) return *code;
  // The GPUs' formats: auto is the cuda backend's.
  const auto formats = cache_flags.Resolve("cuda");
  if (!formats.ok()) {
    std::cerr << "plan: " << formats.status().message() << "\n";
    return 2;
  }
  if (model.empty() == geometry.empty()) {
    std::cerr << "plan: give exactly one of --model DIR and --geometry glm5-full\n";
    return 2;
  }
  std::vector<int64_t> contexts;
  for (absl::string_view part : absl::StrSplit(contexts_flag, ',', absl::SkipEmpty())) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < 1) {
      std::cerr << "plan: --contexts: \"" << part << "\" is not a positive token count\n";
      return 2;
    }
    contexts.push_back(v);
  }
  if (tp < 1 || stages < 1 || layers < 0 || max_model_len < 0 || !(gpu_memory_gib > 0) || runtime_gib < 0) {
    std::cerr << "plan: --tp and --stages must be at least 1, --gpu-memory-gib positive, --layers, "
                 "--max-model-len and --runtime-overhead-gib not negative\n";
    return 2;
  }
  if (!quant.empty() && !model.empty()) {
    std::cerr << "plan: --quant goes with --geometry; --model reads the checkpoint's own quantization config\n";
    return 2;
  }
  absl::StatusOr<ModelConfig> config;
  if (!model.empty()) {
    config = LoadModelConfig(model + "/config.json");
  } else if (geometry == "glm5-full") {
    MakeTinyOptions o;
    o.geometry = TinyGeometry::kGlm5Full;
    o.fp8 = quant.empty();
    o.layers = layers > 0 ? static_cast<int>(layers) : 78;
    config = TinyModelConfig(o);
    if (config.ok() && !quant.empty()) {
      auto format = Glm5ExpertsOnly4Bit(quant);
      if (!format.ok()) {
        std::cerr << "plan: " << format.status().message() << "\n";
        return 2;
      }
      config->quant.weight_format = *format;
    }
  } else {
    std::cerr << "plan: --geometry must be glm5-full, got \"" << geometry << "\"\n";
    return 2;
  }
  if (!config.ok()) {
    std::cerr << "plan: " << config.status().message() << "\n";
    return 1;
  }
  CapacityOptions options;
  options.tp = static_cast<int>(tp);
  options.stages = static_cast<int>(stages);
  if (!stage_layers.empty()) {
    auto ranges = ParseStageLayers(stage_layers, config->num_hidden_layers);
    if (!ranges.ok()) {
      std::cerr << "plan: --stage-layers: " << ranges.status().message() << "\n";
      return 2;
    }
    options.stage_layers = *ranges;
  }
  options.gpu_memory_bytes = static_cast<int64_t>(gpu_memory_gib * (1 << 30));
  options.gpu_memory_utilization = utilization;
  options.runtime_bytes = static_cast<int64_t>(runtime_gib * (1 << 30));
  options.max_model_len = max_model_len;
  options.latent_format = formats->latent;
  options.indexer_format = formats->indexer;
  auto plan = PlanCapacity(*config, options);
  if (!plan.ok() && max_model_len == 0 && options.stage_layers.empty() && options.stages == 1) {
    // The weights may fit while one sequence of the model's whole context
    // does not: say how long a context the GPUs serve.
    const int64_t longest = LongestServableContext(*config, options);
    if (longest > 0) {
      options.max_model_len = longest;
      auto shorter = PlanCapacity(*config, options);
      if (shorter.ok()) {
        std::cout << "the weights fit; the KV cache cannot hold one sequence of the model's " << config->max_position_embeddings
                  << " tokens: serve with --max-model-len " << longest << " (or more GPUs, or an FP8 latent cache)\n\n"
                  << FormatCapacityPlan(*config, options, *shorter, contexts);
        return 0;
      }
    }
  }
  if (plan.ok()) std::cout << FormatCapacityPlan(*config, options, *plan, contexts);
  // The even split is what the daemons use unless told otherwise; say when
  // moving stage boundaries holds more.
  if (options.stage_layers.empty() && options.stages > 1) {
    auto balanced = BalancedStageLayers(*config, options);
    if (balanced.ok()) {
      CapacityOptions b = options;
      b.stage_layers = *balanced;
      auto better = PlanCapacity(*config, b);
      if (better.ok() && (!plan.ok() || better->cache_tokens() > plan->cache_tokens())) {
        std::cout << "\n--stage-layers " << FormatStageLayers(*balanced) << " (scheduler and workers, SPAR_STAGE_LAYERS) holds "
                  << better->cache_tokens() << " tokens"
                  << (plan.ok() ? absl::StrCat(", ", plan->cache_tokens(), " with the even split") : std::string())
                  << "\n";
        if (!plan.ok()) std::cout << FormatCapacityPlan(*config, b, *better, contexts);
      }
    }
  }
  if (!plan.ok()) {
    std::cerr << "plan: " << plan.status().message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace spar
