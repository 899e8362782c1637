// The op interface the layer graph (model.cc) is written against. Two
// backends implement it: cpu (kernels/ref, fp32, the reference) and cuda
// (the sm80 kernels). Ops are mid-level so each backend can fuse inside one:
// the graph says "write the latent cache", the cuda backend runs one fused
// RMSNorm+RoPE+quantize kernel for it.
#ifndef SPAR_ENGINE_BACKEND_H_
#define SPAR_ENGINE_BACKEND_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/cache_layout.h"
#include "base/sampling_params.h"
#include "base/status_macros.h"
#include "engine/host_activations.h"
#include "engine/model_config.h"
#include "engine/safetensors.h"
#include "engine/step_plan.h"
#include "engine/tensor.h"
#include "engine/tensor_parallel.h"
#include "kernels/ref/rope_ref.h"

namespace spar {

// Backend-owned weights; each backend downcasts to its own types.
class Weight {
 public:
  virtual ~Weight() = default;
};

// One checkpoint matrix [rows, cols]: bf16/f32, e4m3 with block scales, or
// 4-bit (engine/weight_format.h) with its scale and zero-point tensors.
struct MatrixSource {
  // Plain and FP8: the [rows, cols] tensor. 4-bit: the packed values (AWQ /
  // GPTQ qweight, compressed-tensors weight_packed, NVFP4 uint8 weight).
  TensorView weight;
  std::optional<TensorView> scale_inv;  // [ceil(rows/128), ceil(cols/128)] for F8_E4M3
  // 4-bit only: the scheme, the logical shape [N, K] and the other tensors
  // (scales: AWQ / GPTQ scales, weight_scale; zeros: qzeros or
  // weight_zero_point when stored), checked by LoadMatrixSource.
  std::optional<QuantScheme> quant;
  int64_t quant_rows = 0, quant_cols = 0;
  std::optional<TensorView> scales, zeros;
  float global_scale = 1.0f;  // NVFP4 weight_scale_2
  // Row and column ranges of `weight` to use (tensor parallel slicing:
  // column-parallel layers take rows, row-parallel layers take columns);
  // the whole matrix by default.
  int64_t row_begin = 0, row_end = -1;
  int64_t col_begin = 0, col_end = -1;
  int64_t full_rows() const { return quant ? quant_rows : weight.shape[0]; }
  int64_t full_cols() const { return quant ? quant_cols : weight.shape[1]; }
  int64_t rows() const { return (row_end < 0 ? full_rows() : row_end) - row_begin; }
  int64_t cols() const { return (col_end < 0 ? full_cols() : col_end) - col_begin; }
  bool sliced() const { return row_begin != 0 || col_begin != 0 || row_end >= 0 || col_end >= 0; }
};

// y = x · Wᵀ where W stacks `parts` along the output dimension.
struct LinearSource {
  std::vector<MatrixSource> parts;
  bool fp32_output = false;  // lm_head: the sampler reads fp32 logits
};

struct MlpSource {
  MatrixSource gate, up, down;
};

struct MoeSource {
  TensorView router;                // [experts, hidden] bf16
  TensorView correction_bias;       // [experts] f32
  int expert_begin = 0;             // local experts [expert_begin, expert_begin + experts.size())
  std::vector<MlpSource> experts;
  std::optional<MlpSource> shared;  // unweighted, added to every token
  int num_experts = 0, top_k = 0, n_group = 1, topk_group = 1;
  bool renormalize = true;
  float routed_scaling = 1.0f;
};

// kv_b_proj split per head into the absorption matrices (dsa-spec.md §2.4):
// W_UK[h] = rows [h·(Dn+Dv), h·(Dn+Dv)+Dn), W_UV[h] = the next Dv rows.
struct AbsorbSource {
  MatrixSource kv_b;
  int heads = 0;      // heads held by this rank
  int head_begin = 0; // first head of this rank
  int nope_dim = 0, v_dim = 0, kv_lora_rank = 0;
};

struct CacheSpec {
  int num_layers = 0;  // layers held by this backend
  int64_t num_blocks = 0;
  // GPU backends: when > 0, num_blocks is ignored and as many blocks are
  // allocated as fit in this fraction of the device's memory, after what is
  // already in use (weights, other processes) and `activation_reserve_bytes`
  // kept free for the step's activations (vLLM's --gpu-memory-utilization).
  double memory_utilization = 0;
  int64_t activation_reserve_bytes = 0;
  LatentFormat latent_format = LatentFormat::kF32;
  IndexerFormat indexer_format = IndexerFormat::kF32;
};

// Per-step indexer settings.
struct IndexerSpec {
  int heads = 0;
  int topk = 0;
  float weight_scale = 1.0f;  // heads^-0.5 · dim^-0.5
  ref::RopePairs rope_pairs = ref::RopePairs::kInterleaved;
  // Control experiment (ModelOptions::random_topk_seed): select a seeded
  // random set of topk causal positions instead of the top-k scores.
  std::optional<uint64_t> random_selection_seed;
};

struct SampleRequest {
  SamplingParams params;
  const TokenHistory* history = nullptr;
  uint64_t step = 0;     // index of the token being sampled in the output
  int top_logprobs = 0;  // alternatives to return
  // Constrained decoding (grammar/): ceil(vocab / 32) words, host memory,
  // id i allowed when bit i % 32 of word i / 32 is set; null: every id.
  // Masked ids get -inf before penalties, sampling and logprobs
  // (ref::ApplyTokenMask; a mask allowing nothing is ignored).
  const uint32_t* token_mask = nullptr;
};

struct SampleResult {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;
};

// Time spent in tensor-parallel all-reduces since the backend was created
// (GPU time between events around each call on the cuda backend).
struct CollectiveStats {
  int64_t calls = 0;
  int64_t bytes = 0;
  double seconds = 0;
};

// Device memory a backend holds: weights and KV caches (0 on the cpu
// backend, whose memory is the host's).
struct DeviceMemoryUsage {
  int64_t weights_bytes = 0;
  int64_t cache_bytes = 0;
  // In use on the device before the first weight: the CUDA context, the
  // stream, the NCCL communicator (and other processes on the same GPU).
  int64_t runtime_bytes = 0;
};

// One op of a profiled step (Backend::TakeOpProfile).
struct OpTime {
  std::string label;  // "gemm 2048x6144", "sparse_mla", "moe.experts", ...
  double seconds = 0;
};

// How steps ran on a backend that replays decode steps as graphs.
struct StepGraphStats {
  int64_t graphs = 0;            // held now
  int64_t captures = 0;          // graphs recorded
  int64_t replays = 0;           // steps run by launching a graph (captures included)
  int64_t eager_steps = 0;       // steps run op by op
  int64_t capture_failures = 0;  // shapes that could not be captured (run eagerly)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // The tensor-parallel group this backend belongs to ({0, 1}: alone).
  virtual TpRank tp() const { return TpRank(); }

  // ---- weights (load time) ----
  virtual absl::StatusOr<std::unique_ptr<Weight>> CreateLinear(const LinearSource& src) = 0;
  virtual absl::StatusOr<std::unique_ptr<Weight>> CreateVector(const TensorView& src) = 0;
  virtual absl::StatusOr<std::unique_ptr<Weight>> CreateEmbedding(const TensorView& src) = 0;
  virtual absl::StatusOr<std::unique_ptr<Weight>> CreateAbsorb(const AbsorbSource& src) = 0;
  virtual absl::StatusOr<std::unique_ptr<Weight>> CreateMlp(const MlpSource& src) = 0;
  virtual absl::StatusOr<std::unique_ptr<Weight>> CreateMoe(const MoeSource& src) = 0;
  // RoPE tables for MLA and the indexer (same frequencies, maybe other
  // pairs), covering positions [0, max_positions).
  virtual absl::Status SetRope(const ref::RopeParams& params, int64_t max_positions) = 0;

  // ---- caches ----
  // Returns the number of blocks allocated (spec.num_blocks unless the
  // backend sized the caches from spec.memory_utilization).
  virtual absl::StatusOr<int64_t> AllocateCaches(const CacheSpec& spec) = 0;
  // The bytes of one block of one layer's cache as stored, in the spec's
  // format (base/cache_layout.h): its 64 latent rows, or its indexer page.
  // For tests that check what a backend stores against kernels/ref's codecs.
  enum class CacheKind { kLatent, kIndexer };
  virtual absl::StatusOr<std::vector<uint8_t>> ReadCacheBlock(CacheKind kind, int layer, int64_t block) {
    (void)kind, (void)layer, (void)block;
    return absl::UnimplementedError(name() + " backend cannot read its caches back");
  }

  // ---- per step ----
  // Uploads the plan's per-token metadata; ops below refer to it.
  virtual absl::Status BeginStep(const StepPlan& plan) = 0;

  // One whole step: BeginStep(plan), then `ops` (the layer graph's op calls
  // on `input`; null on the first stage) whose result is returned. A backend
  // may record the ops of a decode step once per step shape and replay them
  // later (the cuda backend's CUDA graphs), so when `options.replayable` is
  // set, `ops` must issue the same op sequence for every plan of the same
  // shape (same tokens, sequences, logit rows) and read the plan only
  // through the step metadata BeginStep uploads.
  struct StepOptions {
    bool replayable = false;
    // The indexer's top-k (0: no indexer): a decode step whose contexts all
    // fit in it selects every key without scoring, a different op sequence.
    int64_t indexer_topk = 0;
    // Indexer heads: a step with n tokens per sequence scores them with the
    // paged decode kernel only while n x heads fits its 256 query rows.
    int indexer_heads = 0;
    // Which of a model's op sequences `ops` is (its logits step, the step
    // that ends at the normed hidden states, the MTP layer's step): steps of
    // the same shape but another variant are replayed from other graphs.
    int graph_variant = 0;
    // Steps with up to this many tokens for every sequence (the same count
    // for all) may be replayed too: speculative decoding's verify steps.
    int max_tokens_per_seq = 1;
  };
  using StepOps = std::function<absl::StatusOr<Tensor>(const Tensor* input)>;
  virtual absl::StatusOr<Tensor> RunStep(const StepPlan& plan, const Tensor* input, const StepOps& ops,
                                         const StepOptions& options) {
    (void)options;
    if (auto s = BeginStep(plan); !s.ok()) return s;
    return ops(input);
  }

  virtual absl::StatusOr<Tensor> Embed(const Weight& table) = 0;           // [T, hidden]
  virtual absl::StatusOr<Tensor> Linear(const Tensor& x, const Weight& w) = 0;
  virtual absl::StatusOr<Tensor> RmsNorm(const Tensor& x, const Weight& w, float eps) = 0;
  // residual += x (residual empty: residual = x); returns RmsNorm(residual).
  virtual absl::StatusOr<Tensor> AddRmsNorm(Tensor* residual, const Tensor& x, const Weight& w, float eps) = 0;
  virtual absl::Status AddInPlace(Tensor* acc, const Tensor& x) = 0;
  virtual absl::StatusOr<Tensor> Mlp(const Tensor& x, const Weight& mlp) = 0;
  virtual absl::StatusOr<Tensor> Moe(const Tensor& x, const Weight& moe) = 0;
  virtual absl::StatusOr<Tensor> GatherRows(const Tensor& x, const std::vector<int32_t>& rows) = 0;
  // Sets rows of x to zero in place (the MTP layer's embedding at position
  // 0). Rows are host numbers: a step that calls it is not replayable.
  virtual absl::Status ZeroRows(Tensor* x, const std::vector<int32_t>& rows) = 0;

  // Attention pieces (layer = index among this backend's layers).
  // kv_a: [T, 576] projection output; writes RMSNorm(c)·w ‖ RoPE(k_pe).
  virtual absl::Status WriteLatentCache(int layer, const Tensor& kv_a, const Weight& kv_a_norm, float eps) = 0;
  // q: [T, H·(Dn+Dr)] → [T, H·576] = q_nope·W_UK ‖ RoPE(q_pe).
  virtual absl::StatusOr<Tensor> AbsorbQuery(const Tensor& q, const Weight& absorb) = 0;
  // WriteLatentCache then AbsorbQuery of the same step. A backend may fuse
  // them (cuda: RoPE(q_pe) runs in the cache write's launch, one launch
  // fewer on the layer's query branch); the results are the same.
  virtual absl::StatusOr<Tensor> WriteLatentCacheAndAbsorbQuery(int layer, const Tensor& kv_a, const Weight& kv_a_norm,
                                                                float eps, const Tensor& q, const Weight& absorb) {
    SPAR_RETURN_IF_ERROR(WriteLatentCache(layer, kv_a, kv_a_norm, eps));
    return AbsorbQuery(q, absorb);
  }
  // k: [T, 128] wk output; writes RoPE(LayerNorm(k)) to the indexer cache.
  virtual absl::Status WriteIndexerCache(int layer, const Tensor& k, const Weight& norm_w, const Weight& norm_b,
                                         float eps, const IndexerSpec& spec) = 0;
  // RmsNorm(x) and WriteIndexerCache(k) of the same step (the layer's q_a
  // norm and its indexer keys, both columns of the fused A projection): a
  // backend may run them as one launch (cuda: the key write then leaves the
  // indexer branch, the longer of the layer's two). The default runs both.
  virtual absl::StatusOr<Tensor> RmsNormAndWriteIndexerCache(const Tensor& x, const Weight& w, float eps, int layer,
                                                             const Tensor& k, const Weight& k_norm_w,
                                                             const Weight& k_norm_b, float k_eps,
                                                             const IndexerSpec& spec) {
    SPAR_RETURN_IF_ERROR(WriteIndexerCache(layer, k, k_norm_w, k_norm_b, k_eps, spec));
    return RmsNorm(x, w, eps);
  }
  // q: [T, Hi·128] wq_b output (before RoPE), w: [T, Hi] weights_proj output.
  // Returns [T, topk] int32 cache slots, -1 padded.
  virtual absl::StatusOr<Tensor> IndexerTopK(int layer, const Tensor& q, const Tensor& w, const IndexerSpec& spec) = 0;
  // q_abs: [T, H·576], indices: [T, topk] → [T, H·512].
  virtual absl::StatusOr<Tensor> SparseMla(int layer, const Tensor& q_abs, const Tensor& indices, float scale) = 0;
  // o_lat: [T, H·512] → [T, H·Dv].
  virtual absl::StatusOr<Tensor> UnabsorbOutput(const Tensor& o_lat, const Weight& absorb) = 0;
  // SparseMla then UnabsorbOutput: q_abs [T, H·576] → [T, H·Dv]. A backend
  // may fuse them (cuda, at decode sizes: the attention's split merge runs
  // inside the un-absorption, one launch fewer on the step's critical
  // path); the result is the same.
  virtual absl::StatusOr<Tensor> AttendAndUnabsorb(int layer, const Tensor& q_abs, const Tensor& indices, float scale,
                                                   const Weight& absorb) {
    SPAR_ASSIGN_OR_RETURN(Tensor o_lat, SparseMla(layer, q_abs, indices, scale));
    return UnabsorbOutput(o_lat, absorb);
  }

  // Runs two pieces of the layer graph that do not read each other's
  // results (each enqueues ops on this backend). A backend may overlap them:
  // the cuda backend puts `side` on a second stream at small token counts,
  // so its latency-bound kernels (the indexer's top-k, the MoE routing) run
  // beside the other's memory-bound GEMMs; the results are the same as
  // running them one after the other, which is what this default does.
  virtual absl::Status RunConcurrently(const std::function<absl::Status()>& side,
                                       const std::function<absl::Status()>& main) {
    if (absl::Status s = side(); !s.ok()) return s;
    return main();
  }
  // Turns the overlap of RunConcurrently on or off at run time (benchmarks
  // and tests compare both on the same caches); a no-op where it is serial.
  virtual void set_branch_overlap(bool enabled) { (void)enabled; }
  // FP8 latent rows widened into a bf16 scratch before a prefill step's
  // sparse MLA (kernels/cuda/attention/latent_widen.h): nullopt follows the
  // policy (ShouldWidenLatentRows), true / false widen always / never where
  // the rows are FP8, for tests and same-binary A/Bs. A no-op where there is
  // no such path.
  virtual void set_latent_widening(std::optional<bool> forced) { (void)forced; }

  // Sums x over the ranks of the tensor-parallel group, in place; every rank
  // ends with the same values. A no-op without a group.
  virtual absl::Status AllReduceSum(Tensor* x) = 0;
  // Runs `work` (which enqueues ops on this backend) and returns its duration
  // in seconds on the backend's own clock: CUDA events on the backend's
  // stream (waits for the work to finish), wall time on the cpu.
  virtual absl::StatusOr<double> TimeWork(const std::function<absl::Status()>& work) = 0;
  virtual DeviceMemoryUsage device_memory() const { return DeviceMemoryUsage(); }
  // Totals of the all-reduces so far (may wait for the ones in flight).
  virtual CollectiveStats collective_stats() { return CollectiveStats(); }
  // The durations in seconds of the all-reduces finished since the last
  // call, in order (the worker's spar_nccl_allreduce_seconds histogram).
  // Call after the step's results were read: it may wait for the rest.
  virtual std::vector<double> TakeCollectiveDurations() { return {}; }
  // A member of the tensor-parallel group is gone: fail the collectives in
  // flight (a GPU kernel would otherwise wait for the lost rank forever) and
  // every later step. Any thread may call it; the backend cannot compute
  // again (a re-formed group loads a new one).
  virtual void AbortCollectives() {}
  // Joins a new tensor-parallel group of the same rank and size, keeping
  // the weights and caches: when the old group lost a member, the survivors
  // rejoin (collectively, like the first formation) instead of reloading
  // their shards. `group` carries what this backend's kind needs (cuda: the
  // new NCCL unique id; cpu: the new CpuGroup). The old group is aborted if
  // it was not yet. Sequences in the caches are meaningless afterwards.
  struct TpRendezvous {
    std::string nccl_unique_id;
    std::shared_ptr<CpuGroup> cpu_group;
  };
  virtual absl::Status RejoinGroup(const TpRendezvous& group) {
    (void)group;
    return absl::UnimplementedError(name() + " backend cannot rejoin a tensor-parallel group");
  }
  virtual StepGraphStats graph_stats() const { return StepGraphStats(); }
  // Turns replaying on or off at run time (benchmarks and tests compare
  // replayed with eager steps on the same caches); a no-op without graphs.
  virtual void set_step_replay(bool enabled) { (void)enabled; }
  // Per-op GPU time of eager steps, for benchmarks: while on, each op marks
  // its start on the stream, and TakeOpProfile returns every op since the
  // last call with the time to the next mark (ops run one after another).
  // Empty on backends without it; nothing is recorded inside graph capture.
  virtual void set_op_profile(bool enabled) { (void)enabled; }
  virtual absl::StatusOr<std::vector<OpTime>> TakeOpProfile() { return std::vector<OpTime>(); }

  // Logits [S, vocab] → one sample per row.
  virtual absl::StatusOr<std::vector<SampleResult>> Sample(const Tensor& logits,
                                                           const std::vector<SampleRequest>& requests) = 0;
  // Host copy of a tensor as fp32 (tests, traces, logits).
  virtual absl::StatusOr<std::vector<float>> ToHost(const Tensor& x) = 0;
  // Device tensor from host fp32 rows (benchmarks, tests).
  virtual absl::StatusOr<Tensor> FromHost(const std::vector<float>& data, int64_t rows, int64_t cols) = 0;
  // Hidden states across a pipeline hop, in the backend's activation dtype
  // with no conversion (cuda: bf16, cpu: fp32). FromHostActivations takes
  // F32 or BF16 rows and converts only when they are not its own dtype.
  virtual absl::StatusOr<HostActivations> ToHostActivations(const Tensor& x) = 0;
  virtual absl::StatusOr<Tensor> FromHostActivations(const HostActivations& x) = 0;
};

}  // namespace spar

#endif  // SPAR_ENGINE_BACKEND_H_
