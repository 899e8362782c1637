// spar make-tiny --arch glm5|dsv32 --out DIR [--fp8 | --quant awq|gptq|int4-ct|nvfp4]
//                [--seed N] [--geometry tiny|glm5-full] [--layers N] [--index-topk K]
//                [--max-position-embeddings N] [--moe-intermediate-size N] [--mtp] [--predictable]
#include <iostream>

#include "engine/make_tiny.h"
#include "services/common/args.h"
#include "services/cli/commands.h"

namespace spar {

int RunMakeTiny(int argc, char** argv) {
  std::string arch = "glm5", geometry = "tiny", out, indexer_pattern, quant;
  bool fp8 = false, mtp = false, predictable = false;
  int64_t seed = 0, layers = 0, index_topk = 0, shard_mb = 0, max_positions = 0, moe_inter = 0;
  ArgParser args("make-tiny");
  args.AddString("arch", &arch, "glm5 (GlmMoeDsaForCausalLM) or dsv32 (DeepseekV32ForCausalLM)");
  args.AddString("out", &out, "output directory (created if missing)");
  args.AddBool("fp8", &fp8, "block-FP8 e4m3 weights with 128x128 scales, as the real FP8 checkpoints");
  args.AddString("quant", &quant,
                 "4-bit weights as published: awq (AutoAWQ GEMM), gptq (GPTQ v1), int4-ct (compressed-tensors "
                 "pack-quantized) or nvfp4 (ModelOpt)");
  args.AddInt("seed", &seed, "weight seed (same seed, same bytes on every machine)");
  args.AddString("geometry", &geometry, "tiny (default) or glm5-full (real GLM-5 layer sizes)");
  args.AddInt("layers", &layers, "number of decoder layers (default: 3 tiny, 4 glm5-full)");
  args.AddInt("index-topk", &index_topk, "override index_topk (default: 32 tiny, 2048 glm5-full)");
  args.AddInt("max-position-embeddings", &max_positions,
              "the context length in config.json (default: 4096 tiny glm5, 163840 tiny dsv32, 202752 glm5-full)");
  args.AddInt("moe-intermediate-size", &moe_inter,
              "each routed expert's width, a multiple of 8 (default: 192 tiny glm5, 128 tiny dsv32, 2048 glm5-full)");
  args.AddString("indexer-pattern", &indexer_pattern, "per-layer indexer kinds, F = full, S = shared (glm5), e.g. FSF");
  args.AddBool("mtp", &mtp, "also write the multi-token-prediction layer (model.layers.{layers}.*) for speculative decoding");
  args.AddBool("predictable", &predictable,
               "tests: small layer outputs, so the next token depends mostly on the current one and --mtp drafts are often right");
  args.AddInt("shard-mb", &shard_mb, "split weights into shards of at most this many MiB (0: one file)");
  if (auto code = args.ParseOrExitCode(argc, argv, 2)) return *code;
  MakeTinyOptions options;
  if (arch == "glm5") {
    options.arch = ModelArch::kGlmMoeDsa;
  } else if (arch == "dsv32") {
    options.arch = ModelArch::kDeepseekV32;
  } else {
    std::cerr << "make-tiny: --arch must be glm5 or dsv32, got \"" << arch << "\"\n";
    return 2;
  }
  if (geometry == "tiny") {
    options.geometry = TinyGeometry::kTiny;
  } else if (geometry == "glm5-full") {
    options.geometry = TinyGeometry::kGlm5Full;
  } else {
    std::cerr << "make-tiny: --geometry must be tiny or glm5-full, got \"" << geometry << "\"\n";
    return 2;
  }
  if (seed < 0 || layers < 0 || index_topk < 0 || shard_mb < 0) {
    std::cerr << "make-tiny: --seed, --layers, --index-topk and --shard-mb must not be negative\n";
    return 2;
  }
  auto tiny_quant = ParseTinyQuant(quant);
  if (!tiny_quant.ok()) {
    std::cerr << "make-tiny: " << tiny_quant.status().message() << "\n";
    return 2;
  }
  options.fp8 = fp8;
  options.quant = *tiny_quant;
  options.seed = static_cast<uint64_t>(seed);
  options.layers = static_cast<int>(layers);
  options.index_topk = static_cast<int>(index_topk);
  options.max_position_embeddings = max_positions;
  options.moe_intermediate_size = moe_inter;
  options.max_shard_bytes = static_cast<uint64_t>(shard_mb) << 20;
  options.out_dir = out;
  options.indexer_pattern = indexer_pattern;
  options.mtp = mtp;
  options.predictable = predictable;
  if (auto s = MakeTinyModel(options); !s.ok()) {
    std::cerr << "make-tiny: " << s.message() << "\n";
    return 1;
  }
  const std::string kind = !quant.empty() ? quant : fp8 ? "fp8" : "bf16";
  std::cout << "wrote " << arch << " " << kind << " model to " << out << "\n";
  return 0;
}

}  // namespace spar
