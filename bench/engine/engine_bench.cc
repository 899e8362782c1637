// Whole-layer decode and prefill timing of the engine on a backend: loads a
// stage of a checkpoint (e.g. the MoE layers of `make-tiny --geometry
// glm5-full`), fills the caches with a real prefill of `--context` tokens,
// then times decode steps at each batch size (every sequence reads the same
// context blocks; each writes its own new block) and a prefill chunk.
// Per-layer time is compared with the roofline: the bytes of the layer's
// active weights plus the cache rows it must read, at the copy bandwidth
// measured in the same run. With --tp-size > 1 one process per GPU runs the
// same command (rank 0 writes the NCCL id to --nccl-id-file) and the
// all-reduce share of the step is reported.
//
// Timings: medians after warm-up, CUDA events on the backend's stream around
// Model::Forward (host launch work included when it stalls the GPU).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "base/rng.h"
#include "base/status_macros.h"
#include "bench/common/bench_util.h"
#include "engine/checkpoint.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/engine.h"
#include "engine/make_tiny.h"
#include "engine/model.h"
#include "engine/weight_names.h"

namespace spar {
namespace {

struct Flags {
  std::string model;
  std::string make_geometry;  // "glm5-full": write the checkpoint first
  int make_layers = 5;
  bool fp8 = true;
  int first_layer = 3, last_layer = 5;
  std::vector<int> batches = {1, 64};
  int context = 8192;
  int prefill_chunk = 4096;
  int warmup = 3, reps = 15;
  std::string latent = "bf16";
  int device = 0;
  TpRank tp;
  std::string nccl_id_file;
};

absl::StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> absl::StatusOr<std::string> {
      if (i + 1 >= argc) return absl::InvalidArgumentError(a + " needs a value");
      return std::string(argv[++i]);
    };
    auto int_value = [&](int* out) -> absl::Status {
      SPAR_ASSIGN_OR_RETURN(std::string v, value());
      if (!absl::SimpleAtoi(v, out)) return absl::InvalidArgumentError(a + ": not an integer: " + v);
      return absl::OkStatus();
    };
    if (a == "--model") {
      SPAR_ASSIGN_OR_RETURN(f.model, value());
    } else if (a == "--make-geometry") {
      SPAR_ASSIGN_OR_RETURN(f.make_geometry, value());
    } else if (a == "--make-layers") {
      SPAR_RETURN_IF_ERROR(int_value(&f.make_layers));
    } else if (a == "--bf16-weights") {
      f.fp8 = false;
    } else if (a == "--layers") {
      SPAR_ASSIGN_OR_RETURN(std::string v, value());
      std::vector<std::string> p = absl::StrSplit(v, ':');
      if (p.size() != 2 || !absl::SimpleAtoi(p[0], &f.first_layer) || !absl::SimpleAtoi(p[1], &f.last_layer)) {
        return absl::InvalidArgumentError("--layers wants A:B");
      }
    } else if (a == "--batches") {
      SPAR_ASSIGN_OR_RETURN(std::string v, value());
      f.batches.clear();
      for (absl::string_view s : absl::StrSplit(v, ',')) {
        int b;
        if (!absl::SimpleAtoi(s, &b) || b < 1) return absl::InvalidArgumentError("--batches wants N,N,...");
        f.batches.push_back(b);
      }
    } else if (a == "--context") {
      SPAR_RETURN_IF_ERROR(int_value(&f.context));
    } else if (a == "--prefill-chunk") {
      SPAR_RETURN_IF_ERROR(int_value(&f.prefill_chunk));
    } else if (a == "--reps") {
      SPAR_RETURN_IF_ERROR(int_value(&f.reps));
    } else if (a == "--latent") {
      SPAR_ASSIGN_OR_RETURN(f.latent, value());
    } else if (a == "--device") {
      SPAR_RETURN_IF_ERROR(int_value(&f.device));
    } else if (a == "--tp-rank") {
      SPAR_RETURN_IF_ERROR(int_value(&f.tp.rank));
    } else if (a == "--tp-size") {
      SPAR_RETURN_IF_ERROR(int_value(&f.tp.size));
    } else if (a == "--nccl-id-file") {
      SPAR_ASSIGN_OR_RETURN(f.nccl_id_file, value());
    } else {
      return absl::InvalidArgumentError("unknown flag " + a);
    }
  }
  if (f.model.empty()) return absl::InvalidArgumentError("--model DIR is required");
  if (f.context % kBlockSize != 0) return absl::InvalidArgumentError("--context must be a multiple of 64");
  return f;
}

absl::StatusOr<std::string> ExchangeNcclId(const Flags& f) {
  if (f.tp.rank == 0) {
    SPAR_ASSIGN_OR_RETURN(std::string id, NewNcclUniqueId());
    std::ofstream(f.nccl_id_file + ".tmp", std::ios::binary) << id;
    std::rename((f.nccl_id_file + ".tmp").c_str(), f.nccl_id_file.c_str());
    return id;
  }
  for (int i = 0; i < 3000; ++i) {
    std::ifstream in(f.nccl_id_file, std::ios::binary);
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (s.size() == 128) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return absl::DeadlineExceededError("no NCCL id in " + f.nccl_id_file);
}

// Bytes one decode step must read on one rank for layer l at batch b: the
// layer's replicated weights (A projections, indexer, norms, router), this
// rank's 1/tp of the head- and column-split ones (q_b, kv_b, o_proj, dense
// and shared-expert MLPs), the routed experts of this rank the batch touches
// (expected distinct experts under uniform routing), plus per sequence the
// top-k latent rows and the whole indexer key cache.
struct Roofline {
  double weight_bytes = 0, cache_bytes = 0;
};

absl::StatusOr<Roofline> LayerBytes(const Checkpoint& ck, const ModelConfig& c, int l, int batch, int context,
                                    size_t latent_row_bytes, int tp) {
  Roofline r;
  const std::string prefix = "model.layers." + std::to_string(l) + ".";
  const std::string experts = prefix + "mlp.experts.";
  double one_expert = 0;
  for (const std::string& name : ck.Names()) {
    if (name.rfind(prefix, 0) != 0) continue;
    SPAR_ASSIGN_OR_RETURN(TensorView t, ck.Get(name));
    if (name.rfind(experts, 0) == 0) {
      if (name.find(".experts.0.") != std::string::npos) one_expert += t.nbytes;
      continue;
    }
    const bool split = name.find("q_b_proj") != std::string::npos || name.find("kv_b_proj") != std::string::npos ||
                       name.find("o_proj") != std::string::npos || name.find("shared_experts") != std::string::npos ||
                       name.find("mlp.gate_proj") != std::string::npos || name.find("mlp.up_proj") != std::string::npos ||
                       name.find("mlp.down_proj") != std::string::npos;
    r.weight_bytes += split ? static_cast<double>(t.nbytes) / tp : t.nbytes;
  }
  if (c.is_moe_layer(l)) {
    const double e = c.n_routed_experts, k = c.num_experts_per_tok;
    const double distinct = e * (1.0 - std::pow(1.0 - k / e, batch));
    r.weight_bytes += distinct / tp * one_expert;
  }
  const double rows = std::min<double>(context + 1, c.index_topk);
  r.cache_bytes = batch * (rows * latent_row_bytes + (context + 1) * ref::IndexerPageBytes(ref::IndexerFormat::kFp8) /
                                                          static_cast<double>(kBlockSize));
  return r;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

absl::Status Run(const Flags& f) {
  if (!f.make_geometry.empty() && f.tp.rank == 0) {
    MakeTinyOptions o;
    o.arch = ModelArch::kGlmMoeDsa;
    if (f.make_geometry != "glm5-full") return absl::InvalidArgumentError("--make-geometry: glm5-full only");
    o.geometry = TinyGeometry::kGlm5Full;
    o.layers = f.make_layers;
    o.fp8 = f.fp8;
    o.seed = 1;
    o.max_shard_bytes = uint64_t{4} << 30;
    o.out_dir = f.model;
    const auto t0 = std::chrono::steady_clock::now();
    SPAR_RETURN_IF_ERROR(MakeTinyModel(o));
    std::fprintf(stderr, "wrote %s in %.1f s\n", f.model.c_str(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  BackendOptions bo;
  bo.name = "cuda";
  bo.device = f.device;
  bo.tp = f.tp;
  if (f.tp.size > 1) {
    SPAR_ASSIGN_OR_RETURN(bo.nccl_unique_id, ExchangeNcclId(f));
  }
  SPAR_ASSIGN_OR_RETURN(auto backend, CreateBackend(bo));
  SPAR_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(f.model + "/config.json"));
  const int max_batch = *std::max_element(f.batches.begin(), f.batches.end());
  const int ctx_blocks = f.context / kBlockSize;
  ModelOptions mo;
  mo.first_layer = f.first_layer;
  mo.last_layer = f.last_layer;
  mo.num_blocks = ctx_blocks + max_batch + 2;
  mo.latent_format = f.latent == "fp8" ? ref::LatentFormat::kFp8Ds : ref::LatentFormat::kBF16;
  mo.indexer_format = ref::IndexerFormat::kFp8;
  const auto t0 = std::chrono::steady_clock::now();
  SPAR_ASSIGN_OR_RETURN(auto model, Model::Load(f.model, backend.get(), mo));
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int layers = f.last_layer - f.first_layer;
  const int64_t hidden = config.hidden_size;
  // Decode steps ask for no logits, so a last stage times its layers only.
  if (model->is_first_stage()) return absl::InvalidArgumentError("--layers must start after layer 0 (stage input is hidden states)");
  Rng rng(7);
  auto random_hidden = [&](int64_t rows) {
    std::vector<float> h(static_cast<size_t>(rows * hidden));
    for (auto& v : h) v = static_cast<float>((rng.UniformDouble() * 2 - 1) * 1.732);  // unit variance
    return h;
  };

  // Prefill the shared context in chunks (timed: prefill throughput).
  std::vector<int32_t> ctx_table(ctx_blocks);
  for (int i = 0; i < ctx_blocks; ++i) ctx_table[i] = i;
  std::vector<double> prefill_s;
  for (int start = 0; start < f.context; start += f.prefill_chunk) {
    const int n = std::min(f.prefill_chunk, f.context - start);
    StepPlan plan;
    SequenceStep s;
    s.seq_id = 0;
    s.start_pos = start;
    s.tokens.assign(n, 1);
    s.block_table.assign(ctx_table.begin(), ctx_table.begin() + (start + n + kBlockSize - 1) / kBlockSize);
    s.num_logits = 0;
    plan.seqs.push_back(s);
    SPAR_RETURN_IF_ERROR(plan.Finalize(config.vocab_size, config.max_position_embeddings, mo.num_blocks));
    SPAR_ASSIGN_OR_RETURN(Tensor in, backend->FromHost(random_hidden(n), n, hidden));
    SPAR_ASSIGN_OR_RETURN(double sec, backend->TimeWork([&]() -> absl::Status {
      return model->Forward(plan, &in).status();
    }));
    if (n == f.prefill_chunk) prefill_s.push_back(sec);
  }

  const double bw = bench::MeasureCopyBandwidthGBs() * 1e9;
  SPAR_ASSIGN_OR_RETURN(auto ck, Checkpoint::Open(f.model));
  const size_t latent_row = ref::LatentRowBytes(mo.latent_format);
  if (f.tp.rank == 0) {
    std::printf("# engine_bench: %s, layers [%d, %d) of %s, context %d, latent %s, TP %d, load %.1f s, copy bw %.0f GB/s\n",
                bench::DeviceName().c_str(), f.first_layer, f.last_layer, f.model.c_str(), f.context,
                f.latent.c_str(), f.tp.size, load_s, bw / 1e9);
    if (!prefill_s.empty()) {
      const double s = Median(prefill_s);
      std::printf("prefill chunk %d tokens at context <= %d: %.2f ms per layer, %.0f tokens/s per layer\n",
                  f.prefill_chunk, f.context, s * 1e3 / layers, f.prefill_chunk / (s / layers));
    }
    std::printf("| batch | step ms | per-layer ms | weights MB/layer | cache MB/layer | roofline ms/layer | "
                "%% of roofline | all-reduce ms/step | all-reduce share |\n|---|---|---|---|---|---|---|---|---|\n");
  }
  for (int b : f.batches) {
    StepPlan plan;
    for (int i = 0; i < b; ++i) {
      SequenceStep s;
      s.seq_id = 1 + i;
      s.start_pos = f.context;
      s.tokens = {1};
      s.block_table = ctx_table;
      s.block_table.push_back(ctx_blocks + i);  // own block for the new row
      s.num_logits = 0;
      plan.seqs.push_back(s);
    }
    SPAR_RETURN_IF_ERROR(plan.Finalize(config.vocab_size, config.max_position_embeddings, mo.num_blocks));
    SPAR_ASSIGN_OR_RETURN(Tensor in, backend->FromHost(random_hidden(b), b, hidden));
    std::vector<double> times;
    CollectiveStats before = backend->collective_stats();
    for (int r = 0; r < f.warmup + f.reps; ++r) {
      if (r == f.warmup) before = backend->collective_stats();
      SPAR_ASSIGN_OR_RETURN(double sec, backend->TimeWork([&]() -> absl::Status {
        return model->Forward(plan, &in).status();
      }));
      if (r >= f.warmup) times.push_back(sec);
    }
    const CollectiveStats after = backend->collective_stats();
    const double step = Median(times);
    const double ar_per_step = (after.seconds - before.seconds) / f.reps;
    double weights = 0, cache = 0;
    for (int l = f.first_layer; l < f.last_layer; ++l) {
      SPAR_ASSIGN_OR_RETURN(Roofline r, LayerBytes(*ck, config, l, b, f.context, latent_row, f.tp.size));
      weights += r.weight_bytes;
      cache += r.cache_bytes;
    }
    weights /= layers;
    cache /= layers;
    // The copy bandwidth counts read + write; a decode step only reads.
    const double roof = (weights + cache) / (bw / 2);
    if (f.tp.rank == 0) {
      std::printf("| %d | %.3f | %.3f | %.1f | %.1f | %.3f | %.0f%% | %.3f | %.0f%% |\n", b, step * 1e3,
                  step * 1e3 / layers, weights / 1e6, cache / 1e6, roof * 1e3, 100.0 * roof / (step / layers),
                  ar_per_step * 1e3, 100.0 * ar_per_step / step);
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace spar

int main(int argc, char** argv) {
  auto flags = spar::ParseFlags(argc, argv);
  if (!flags.ok()) {
    std::fprintf(stderr, "engine_bench: %s\n", std::string(flags.status().message()).c_str());
    return 2;
  }
  if (auto s = spar::Run(*flags); !s.ok()) {
    std::fprintf(stderr, "engine_bench: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
