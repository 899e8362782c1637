// Whole-layer decode and prefill timing of the engine on a backend: loads a
// stage of a checkpoint (e.g. the MoE layers of `make-tiny --geometry
// glm5-full`), fills the caches of max(--batches) sequences with a real
// prefill of max(--contexts) tokens each (distinct contexts: nothing is
// served from L2 that a real batch would read from memory), then times
// decode steps at each context and batch size, replayed as CUDA graphs and
// eagerly, and the prefill chunks.
// Per-layer time is compared with the roofline: the bytes of the layer's
// active weights plus the cache rows it must read, at the copy bandwidth
// measured in the same run. With --tp-size > 1 one process per GPU runs the
// same command (rank 0 writes the NCCL id to --nccl-id-file) and the
// all-reduce share of the step is reported.
//
// Timings: medians after warm-up, CUDA events on the backend's stream around
// Model::Forward (host launch work included when it stalls the GPU); "host"
// is the wall time the eager step's Forward call takes to enqueue its work.
// --op-profile adds, per shape, where an eager step's GPU time goes, op by
// op (Backend::TakeOpProfile; the host's enqueueing hidden behind a GPU wait),
// and the same for the last full prefill chunk of the first sequence.
// --verify-tokens 2,3,4 also times speculative decoding's verify steps (n
// query tokens per sequence: the last token and n - 1 drafts) at each
// context and batch, graph and eager, against the decode step of the same
// shape: the step-time ratio is the mean acceptance length (tokens per
// verify step) speculation needs to break even before its drafting cost.
// --no-branch-overlap runs the layer's independent branches one after the
// other on one stream (Backend::RunConcurrently), for a same-binary A/B;
// --latent-widening always|never overrides the policy that widens FP8 latent
// rows before a prefill chunk's attention (--latent fp8), likewise.
// --no-urgent-branch runs the layer's latency-bound branch on a stream of the
// default priority instead of the highest (BackendOptions::
// urgent_branch_priority off), for an A/B.
// --indexer-query with-qb|before-fork|on-branch places full-indexer layers'
// indexer query GEMM (ModelOptions::indexer_query), for an A/B;
// --no-fuse-indexer-query is --indexer-query on-branch.
// --weight-tiling row-major|along-k|across-rows stores the W8A16 GEMMs'
// weights row-major or in 16-row x 64-byte tiles (BackendOptions::
// gemm_weight_tiling), for an A/B.
// --timeline prints, per shape, the GPU's own timeline of one graph replay
// (bench/common/kernel_timeline.h: each kernel's start and duration as it
// ran, branches overlapped, and the time the GPU ran nothing between them).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/rng.h"
#include "base/status_macros.h"
#include "bench/common/bench_util.h"
#include "bench/common/kernel_timeline.h"
#include "engine/checkpoint.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/engine.h"
#include "engine/make_tiny.h"
#include "engine/model.h"
#include "engine/speculation_limits.h"
#include "engine/weight_names.h"

namespace spar {
namespace {

struct Flags {
  std::string model;
  std::string make_geometry;  // "glm5-full": write the checkpoint first
  int make_layers = 5;
  bool fp8 = true;
  TinyQuant make_quant = TinyQuant::kNone;  // --make-quant: 4-bit weights in a published layout
  int first_layer = 3, last_layer = 5;
  std::vector<int> batches = {1, 8, 32, 128};
  std::vector<int> contexts = {1024, 8192, 32768};
  int prefill_chunk = 4096;
  int warmup = 3, reps = 15;
  std::string latent = "bf16";
  int device = 0;
  TpRank tp;
  std::string nccl_id_file;
  bool op_profile = false;  // per-op GPU time of an eager step per shape
  bool timeline = false;    // --timeline: the GPU timeline of a replayed step per shape
  bool urgent_branch = true;  // --no-urgent-branch: BackendOptions::urgent_branch_priority off (A/B)
  GemmWeightTiling weight_tiling = BackendOptions{}.gemm_weight_tiling;  // --weight-tiling (A/B)
  IndexerQueryGemm indexer_query = ModelOptions{}.indexer_query;  // --indexer-query (A/B)
  bool branch_overlap = true;  // --no-branch-overlap: Backend::RunConcurrently serial (A/B)
  std::optional<bool> latent_widening;  // --latent-widening auto|always|never (A/B)
  std::vector<int> verify_tokens;  // speculative verify steps: query tokens per sequence
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
    } else if (a == "--op-profile") {
      f.op_profile = true;
    } else if (a == "--timeline") {
      f.timeline = true;
    } else if (a == "--weight-tiling") {
      SPAR_ASSIGN_OR_RETURN(std::string v, value());
      SPAR_ASSIGN_OR_RETURN(f.weight_tiling, ParseGemmWeightTiling(v));
    } else if (a == "--no-urgent-branch") {
      f.urgent_branch = false;
    } else if (a == "--no-fuse-indexer-query") {
      f.indexer_query = IndexerQueryGemm::kOnBranch;
    } else if (a == "--indexer-query") {
      SPAR_ASSIGN_OR_RETURN(std::string v, value());
      SPAR_ASSIGN_OR_RETURN(f.indexer_query, ParseIndexerQueryGemm(v));
    } else if (a == "--no-branch-overlap") {
      f.branch_overlap = false;
    } else if (a == "--latent-widening") {
      SPAR_ASSIGN_OR_RETURN(std::string v, value());
      if (v == "always" || v == "never") {
        f.latent_widening = v == "always";
      } else if (v != "auto") {
        return absl::InvalidArgumentError("--latent-widening wants auto, always or never, got " + v);
      }
    } else if (a == "--bf16-weights") {
      f.fp8 = false;
    } else if (a == "--make-quant") {
      SPAR_ASSIGN_OR_RETURN(std::string v, value());
      SPAR_ASSIGN_OR_RETURN(f.make_quant, ParseTinyQuant(v));
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
    } else if (a == "--contexts") {
      SPAR_ASSIGN_OR_RETURN(std::string v, value());
      f.contexts.clear();
      for (absl::string_view s : absl::StrSplit(v, ',')) {
        int c;
        if (!absl::SimpleAtoi(s, &c) || c < kCacheBlockTokens || c % kCacheBlockTokens != 0) {
          return absl::InvalidArgumentError("--contexts wants multiples of 64: N,N,...");
        }
        f.contexts.push_back(c);
      }
    } else if (a == "--verify-tokens") {
      SPAR_ASSIGN_OR_RETURN(std::string v, value());
      for (absl::string_view t : absl::StrSplit(v, ',')) {
        int n;
        if (!absl::SimpleAtoi(t, &n) || n < 2 || n > 1 + kMaxSpeculativeTokens) {
          return absl::InvalidArgumentError("--verify-tokens wants N,N,... in [2, 5]");
        }
        f.verify_tokens.push_back(n);
      }
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
  r.cache_bytes = batch * (rows * latent_row_bytes + (context + 1) * IndexerPageBytes(IndexerFormat::kFp8) /
                                                          static_cast<double>(kCacheBlockTokens));
  return r;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One decode step: sequence i (ids from 1000) at position `context` over
// its prefilled blocks, no logits (the stage times its layers only). With
// `tokens` > 1 a verify step: positions context .. context + tokens - 1.
template <typename TableOf>
absl::StatusOr<StepPlan> DecodePlan(int batch, int context, const ModelConfig& config, int64_t num_blocks,
                                    const TableOf& table_of, int tokens = 1) {
  StepPlan plan;
  for (int i = 0; i < batch; ++i) {
    SequenceStep s;
    s.seq_id = 1000 + i;
    s.start_pos = context;
    s.tokens.assign(tokens, 1);
    s.block_table = table_of(i, (context + tokens - 1) / kCacheBlockTokens + 1);
    s.num_logits = 0;
    plan.seqs.push_back(s);
  }
  SPAR_RETURN_IF_ERROR(plan.Finalize(config.vocab_size, config.max_position_embeddings, num_blocks));
  return plan;
}

// The GPU timeline of the last of three replayed steps of `plan`
// (--timeline): each kernel as it ran, branches overlapped, and where the
// GPU ran nothing between them.
absl::Status PrintStepTimeline(Backend* backend, Model* model, const StepPlan& plan, Tensor* in,
                               const std::string& title, bool print) {
  if (const absl::Status started = bench::KernelTimeline::Start(); !started.ok()) {
    // A machine whose profiler interface is closed still gets its timings.
    if (print) std::printf("\n%s: no timeline (%s)\n", title.c_str(), started.ToString().c_str());
    return absl::OkStatus();
  }
  absl::Status st;
  for (int r = 0; r < 3 && st.ok(); ++r) {
    st = backend->TimeWork([&]() -> absl::Status { return model->Forward(plan, in).status(); }).status();
  }
  SPAR_ASSIGN_OR_RETURN(const std::vector<bench::TimelineEvent> events, bench::KernelTimeline::Stop());
  SPAR_RETURN_IF_ERROR(st);
  if (print) bench::PrintLastReplay(events, title, stdout);
  std::fflush(stdout);
  return absl::OkStatus();
}

// The median over 5 eager runs of `run` (after one warm-up) of each op
// label's GPU time per run (summed over the layers and the label's calls),
// printed largest first under `title`.
template <typename Run>
absl::Status PrintOpProfile(const Flags& f, Backend* backend, const std::string& title, const Run& run) {
  const int layers = f.last_layer - f.first_layer;
  std::map<std::string, std::vector<double>> per_label;
  std::map<std::string, int> calls;
  for (int r = 0; r < 6; ++r) {
    backend->set_op_profile(true);
    const absl::Status st = run();
    backend->set_op_profile(false);
    SPAR_ASSIGN_OR_RETURN(std::vector<OpTime> ops, backend->TakeOpProfile());
    SPAR_RETURN_IF_ERROR(st);
    if (r == 0) continue;  // warm-up
    std::map<std::string, double> step;
    std::map<std::string, int> n;
    for (const OpTime& op : ops) {
      step[op.label] += op.seconds;
      n[op.label] += 1;
    }
    for (const auto& [label, sec] : step) per_label[label].push_back(sec);
    calls = n;
  }
  std::vector<std::pair<double, std::string>> rows;
  double total = 0;
  for (auto& [label, v] : per_label) {
    const double m = Median(v);
    rows.emplace_back(m, label);
    total += m;
  }
  std::sort(rows.rbegin(), rows.rend());
  if (f.tp.rank != 0) return absl::OkStatus();
  std::printf("\nop profile, %s (eager, per layer; sum %.1f us):\n| op | calls/layer | us/layer | share |\n|---|---|---|---|\n",
              title.c_str(), total * 1e6 / layers);
  for (const auto& [sec, label] : rows) {
    std::printf("| %s | %.1f | %.1f | %.0f%% |\n", label.c_str(), static_cast<double>(calls[label]) / layers,
                sec * 1e6 / layers, 100.0 * sec / total);
  }
  std::fflush(stdout);
  return absl::OkStatus();
}

// Per decode shape: where an eager step's GPU time goes.
template <typename TableOf, typename RandomHidden>
absl::Status PrintOpProfiles(const Flags& f, Backend* backend, Model* model, const ModelConfig& config,
                             const TableOf& table_of, const RandomHidden& random_hidden) {
  backend->set_step_replay(false);
  for (int context : f.contexts) {
    for (int b : f.batches) {
      SPAR_ASSIGN_OR_RETURN(StepPlan plan, DecodePlan(b, context, config, model->num_blocks(), table_of));
      SPAR_ASSIGN_OR_RETURN(Tensor in, backend->FromHost(random_hidden(b), b, config.hidden_size));
      const std::string title = "context " + std::to_string(context) + ", batch " + std::to_string(b);
      SPAR_RETURN_IF_ERROR(
          PrintOpProfile(f, backend, title, [&] { return model->Forward(plan, &in).status(); }));
    }
  }
  backend->set_step_replay(true);
  return absl::OkStatus();
}

// Median GPU times of `plan` replayed as a graph and run eagerly.
struct StepTimes {
  double graph = 0, eager = 0;
};
absl::StatusOr<StepTimes> TimeStep(const Flags& f, Backend* backend, Model* model, const StepPlan& plan,
                                   const Tensor& in) {
  std::vector<double> graph_t, eager_t;
  for (bool replay : {true, false}) {
    backend->set_step_replay(replay);
    for (int r = 0; r < f.warmup + f.reps; ++r) {
      SPAR_ASSIGN_OR_RETURN(double sec, backend->TimeWork([&] { return model->Forward(plan, &in).status(); }));
      if (r >= f.warmup) (replay ? graph_t : eager_t).push_back(sec);
    }
  }
  backend->set_step_replay(true);
  return StepTimes{Median(graph_t), Median(eager_t)};
}

// Speculative decoding's verify steps against the decode step of the same
// batch and context (--verify-tokens).
template <typename TableOf, typename RandomHidden>
absl::Status PrintVerifySteps(const Flags& f, Backend* backend, Model* model, const ModelConfig& config,
                              const TableOf& table_of, const RandomHidden& random_hidden) {
  const int layers = f.last_layer - f.first_layer;
  const int kModelLayers = 78;  // GLM-5
  if (f.tp.rank == 0) {
    std::printf("\nverify steps (speculative decoding: n query tokens per sequence) against decode (n = 1):\n"
                "| context | batch | n | step ms (graph) | per-layer ms (graph) | per-layer ms (eager) | "
                "/ decode (graph) | %d-layer step ms | graphs replayed |\n|---|---|---|---|---|---|---|---|---|\n",
                kModelLayers);
  }
  for (int context : f.contexts) {
    for (int b : f.batches) {
      SPAR_ASSIGN_OR_RETURN(StepPlan decode, DecodePlan(b, context, config, model->num_blocks(), table_of));
      SPAR_ASSIGN_OR_RETURN(Tensor in1, backend->FromHost(random_hidden(b), b, config.hidden_size));
      SPAR_ASSIGN_OR_RETURN(StepTimes base, TimeStep(f, backend, model, decode, in1));
      for (int n : f.verify_tokens) {
        SPAR_ASSIGN_OR_RETURN(StepPlan plan, DecodePlan(b, context, config, model->num_blocks(), table_of, n));
        SPAR_ASSIGN_OR_RETURN(Tensor in, backend->FromHost(random_hidden(int64_t{b} * n), int64_t{b} * n,
                                                           config.hidden_size));
        const int64_t replays_before = backend->graph_stats().replays;
        SPAR_ASSIGN_OR_RETURN(StepTimes t, TimeStep(f, backend, model, plan, in));
        const bool replayed = backend->graph_stats().replays > replays_before;
        if (f.tp.rank != 0) continue;
        std::printf("| %d | %d | %d | %.3f | %.3f | %.3f | %.2f | %.2f | %s |\n", context, b, n, t.graph * 1e3,
                    t.graph * 1e3 / layers, t.eager * 1e3 / layers, t.graph / base.graph,
                    t.graph / layers * kModelLayers * 1e3, replayed ? "yes" : "no (eager)");
        std::fflush(stdout);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Run(const Flags& f) {
  if (!f.make_geometry.empty() && f.tp.rank == 0) {
    MakeTinyOptions o;
    o.arch = ModelArch::kGlmMoeDsa;
    if (f.make_geometry != "glm5-full") return absl::InvalidArgumentError("--make-geometry: glm5-full only");
    o.geometry = TinyGeometry::kGlm5Full;
    o.layers = f.make_layers;
    o.fp8 = f.fp8;
    o.quant = f.make_quant;
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
  bo.urgent_branch_priority = f.urgent_branch;
  bo.gemm_weight_tiling = f.weight_tiling;
  if (f.tp.size > 1) {
    SPAR_ASSIGN_OR_RETURN(bo.nccl_unique_id, ExchangeNcclId(f));
  }
  SPAR_ASSIGN_OR_RETURN(auto backend, CreateBackend(bo));
  backend->set_branch_overlap(f.branch_overlap);
  backend->set_latent_widening(f.latent_widening);
  SPAR_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(f.model + "/config.json"));
  const int max_batch = *std::max_element(f.batches.begin(), f.batches.end());
  const int max_context = *std::max_element(f.contexts.begin(), f.contexts.end());
  // Each sequence owns max_context / 64 blocks plus one for its new token.
  const int seq_blocks = max_context / kCacheBlockTokens + 1;
  ModelOptions mo;
  mo.first_layer = f.first_layer;
  mo.last_layer = f.last_layer;
  mo.num_blocks = static_cast<int64_t>(max_batch) * seq_blocks + 2;
  mo.latent_format = f.latent == "fp8" ? LatentFormat::kFp8Ds : LatentFormat::kBF16;
  mo.indexer_format = IndexerFormat::kFp8;
  mo.indexer_query = f.indexer_query;
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
  auto table_of = [&](int seq, int blocks) {
    std::vector<int32_t> t(blocks);
    for (int i = 0; i < blocks; ++i) t[i] = seq * seq_blocks + i;
    return t;
  };

  // Prefill every sequence's context in chunks (timed: prefill throughput).
  // One random chunk serves every chunk: drawing millions of host randoms
  // per chunk would take longer than the prefill itself.
  SPAR_ASSIGN_OR_RETURN(const Tensor chunk_in, backend->FromHost(random_hidden(f.prefill_chunk), f.prefill_chunk, hidden));
  std::vector<double> prefill_s;
  const auto p0 = std::chrono::steady_clock::now();
  // The chunk [start, start + n) of sequence seq.
  auto prefill_plan = [&](int seq, int start, int n) -> absl::StatusOr<StepPlan> {
    StepPlan plan;
    SequenceStep s;
    s.seq_id = seq;
    s.start_pos = start;
    s.tokens.assign(n, 1);
    s.block_table = table_of(seq, (start + n + kCacheBlockTokens - 1) / kCacheBlockTokens);
    s.num_logits = 0;
    plan.seqs.push_back(s);
    SPAR_RETURN_IF_ERROR(plan.Finalize(config.vocab_size, config.max_position_embeddings, mo.num_blocks));
    return plan;
  };
  for (int seq = 0; seq < max_batch; ++seq) {
    for (int start = 0; start < max_context; start += f.prefill_chunk) {
      const int n = std::min(f.prefill_chunk, max_context - start);
      SPAR_ASSIGN_OR_RETURN(const StepPlan plan, prefill_plan(seq, start, n));
      const Tensor in = chunk_in.Rows(0, n);
      SPAR_ASSIGN_OR_RETURN(double sec, backend->TimeWork([&]() -> absl::Status {
        return model->Forward(plan, &in).status();
      }));
      if (n == f.prefill_chunk) prefill_s.push_back(sec);
    }
  }
  const double prefill_wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - p0).count();

  const double bw = bench::MeasureCopyBandwidthGBs() * 1e9;
  SPAR_ASSIGN_OR_RETURN(auto ck, Checkpoint::Open(f.model));
  const size_t latent_row = LatentRowBytes(mo.latent_format);
  const int kModelLayers = 78;  // GLM-5
  if (f.tp.rank == 0) {
    std::printf("# engine_bench: %s, layers [%d, %d) of %s, latent %s, TP %d, load %.1f s, prefill of %d x %d "
                "tokens %.1f s, copy bw %.0f GB/s\n",
                bench::DeviceName().c_str(), f.first_layer, f.last_layer, f.model.c_str(), f.latent.c_str(), f.tp.size,
                load_s, max_batch, max_context, prefill_wall, bw / 1e9);
    if (!prefill_s.empty()) {
      const double s = Median(prefill_s);
      std::printf("prefill chunk %d tokens at contexts <= %d: %.2f ms per layer, %.0f tokens/s per layer\n",
                  f.prefill_chunk, max_context, s * 1e3 / layers, f.prefill_chunk / (s / layers));
    }
    std::printf("| context | batch | step ms (graph) | per-layer ms (graph) | per-layer ms (eager) | host enqueue ms/layer "
                "(eager) | weights MB/layer | cache MB/layer | roofline ms/layer | %% of roofline (graph) | "
                "all-reduce ms/step (eager) | all-reduce share (eager) | %d-layer step ms | tokens/s at %d layers |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
                kModelLayers, kModelLayers);
  }
  for (int context : f.contexts) {
    for (int b : f.batches) {
      SPAR_ASSIGN_OR_RETURN(StepPlan plan, DecodePlan(b, context, config, mo.num_blocks, table_of));
      SPAR_ASSIGN_OR_RETURN(Tensor in, backend->FromHost(random_hidden(b), b, hidden));
      // Replayed (graph) steps, then eager ones on the same caches.
      std::vector<double> graph_t, eager_t, host_t;
      double ar_seconds = 0;
      for (bool replay : {true, false}) {
        backend->set_step_replay(replay);
        CollectiveStats before = backend->collective_stats();
        for (int r = 0; r < f.warmup + f.reps; ++r) {
          if (r == f.warmup) before = backend->collective_stats();
          double host = 0;
          SPAR_ASSIGN_OR_RETURN(double sec, backend->TimeWork([&]() -> absl::Status {
            const auto h0 = std::chrono::steady_clock::now();
            absl::Status st = model->Forward(plan, &in).status();
            host = std::chrono::duration<double>(std::chrono::steady_clock::now() - h0).count();
            return st;
          }));
          if (r < f.warmup) continue;
          (replay ? graph_t : eager_t).push_back(sec);
          if (!replay) host_t.push_back(host);
        }
        if (!replay) ar_seconds = (backend->collective_stats().seconds - before.seconds) / f.reps;
      }
      backend->set_step_replay(true);
      if (f.timeline) {
        SPAR_RETURN_IF_ERROR(PrintStepTimeline(backend.get(), model.get(), plan, &in,
                                               absl::StrCat("context ", context, ", batch ", b), f.tp.rank == 0));
      }
      const double step = Median(graph_t), eager = Median(eager_t), host = Median(host_t);
      double weights = 0, cache = 0;
      for (int l = f.first_layer; l < f.last_layer; ++l) {
        SPAR_ASSIGN_OR_RETURN(Roofline r, LayerBytes(*ck, config, l, b, context, latent_row, f.tp.size));
        weights += r.weight_bytes;
        cache += r.cache_bytes;
      }
      weights /= layers;
      cache /= layers;
      // The copy bandwidth is (bytes read + bytes written) / time: a read-only
      // stream moves its bytes at about the same rate.
      const double roof = (weights + cache) / bw;
      const double per_layer = step / layers;
      if (f.tp.rank == 0) {
        std::printf("| %d | %d | %.3f | %.3f | %.3f | %.3f | %.1f | %.1f | %.3f | %.0f%% | %.3f | %.0f%% | %.2f | %.0f |\n",
                    context, b, step * 1e3, per_layer * 1e3, eager * 1e3 / layers, host * 1e3 / layers, weights / 1e6,
                    cache / 1e6, roof * 1e3, 100.0 * roof / per_layer, ar_seconds * 1e3, 100.0 * ar_seconds / eager,
                    per_layer * kModelLayers * 1e3, b / (per_layer * kModelLayers));
        std::fflush(stdout);
      }
    }
  }
  if (!f.verify_tokens.empty()) {
    SPAR_RETURN_IF_ERROR(PrintVerifySteps(f, backend.get(), model.get(), config, table_of, random_hidden));
  }
  if (f.op_profile) {
    SPAR_RETURN_IF_ERROR(PrintOpProfiles(f, backend.get(), model.get(), config, table_of, random_hidden));
    // The last full chunk of sequence 0 again (it rewrites the same cache
    // rows with the same values).
    const int start = (max_context / f.prefill_chunk - 1) * f.prefill_chunk;
    if (start >= 0) {
      SPAR_ASSIGN_OR_RETURN(const StepPlan plan, prefill_plan(0, start, f.prefill_chunk));
      const Tensor in = chunk_in.Rows(0, f.prefill_chunk);
      const std::string title = "prefill chunk of " + std::to_string(f.prefill_chunk) + " tokens at position " +
                                std::to_string(start);
      SPAR_RETURN_IF_ERROR(
          PrintOpProfile(f, backend.get(), title, [&] { return model->Forward(plan, &in).status(); }));
    }
  }
  if (f.tp.rank == 0) {
    const StepGraphStats g = backend->graph_stats();
    std::printf("graphs: %lld held, %lld captured, %lld replayed steps, %lld eager steps, %lld capture failures\n",
                static_cast<long long>(g.graphs), static_cast<long long>(g.captures),
                static_cast<long long>(g.replays), static_cast<long long>(g.eager_steps),
                static_cast<long long>(g.capture_failures));
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
