// The layer graph of GLM-5 / DeepSeek-V3.2, written once against the
// Backend op interface: embedding -> decoder layers (MLA + DSA indexer,
// dense MLP or MoE) -> final norm -> lm_head. A Model holds one pipeline
// stage's layer range; a single-stage Model holds everything.
#ifndef SPAR_ENGINE_MODEL_H_
#define SPAR_ENGINE_MODEL_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/backend.h"
#include "engine/checkpoint.h"
#include "engine/model_config.h"

namespace spar {

// Where a full-indexer layer's indexer query GEMM runs. The indexer's
// selection (query -> logits -> top-k) is the longer of the attention's two
// branches at decode, so its query should be ready early and not share the
// GPU with q_b's 33 MB stream.
enum class IndexerQueryGemm {
  // q_b's weight also holds wq_b's rows: one GEMM before the branches fork
  // writes both queries. The batch-1 GLM-5 layer 0.275 -> 0.272 ms on an
  // H100 against kOnBranch, the logits 10.9 -> 7.1 us (bench/RESULTS.md,
  // session 32). Only where the two weights are stored alike
  // (SameWeightFormat); an int4 q_b beside a bf16 indexer (AWQ) runs
  // kOnBranch, where it measured faster.
  kWithQb,
  // Its own GEMM before the fork, q_b's on the query branch: the logits and
  // top-k then run beside q_b instead of after it, and lose 3-4 us each to
  // it. On an H100 (session 33) the batch-1 layer 0.273 -> 0.271-0.272 ms
  // but batch 8 0.941 -> 0.945: not the default.
  kBeforeFork,
  // Its own GEMM at the start of the selection branch, beside q_b's.
  kOnBranch,
};

// "with-qb", "before-fork", "on-branch" (flags, logs); Parse* accepts them.
absl::string_view IndexerQueryGemmName(IndexerQueryGemm placement);
absl::StatusOr<IndexerQueryGemm> ParseIndexerQueryGemm(absl::string_view name);

struct ModelOptions {
  int first_layer = 0;
  int last_layer = -1;  // exclusive; -1: through the last layer
  // Overrides index_topk (e.g. above the sequence length: dense attention).
  int index_topk_override = 0;
  // The random-selection control (engine/random_selection.h): every indexer
  // picks a seeded random set of index_topk causal positions instead of its
  // top-k. cpu backend only; for tests that prove the indexer matters.
  std::optional<uint64_t> random_topk_seed;
  // Cache blocks to allocate (64 tokens each) and their formats.
  int64_t num_blocks = 256;
  // When > 0 (GPU backends): size the caches to this fraction of the GPU's
  // memory instead of num_blocks (--gpu-memory-utilization).
  double gpu_memory_utilization = 0;
  // When > 0: the longest sequence served (prompt + output), at most the
  // model's max_position_embeddings (--max-model-len). The caches must hold
  // at least one such sequence.
  int64_t max_model_len = 0;
  LatentFormat latent_format = LatentFormat::kF32;
  IndexerFormat indexer_format = IndexerFormat::kF32;
  // Load the multi-token-prediction layer (model.layers.{num_hidden_layers},
  // num_nextn_predict_layers >= 1) for speculative decoding; ignored on a
  // stage that is not the last. It gets its own latent and indexer caches (one more cache layer,
  // the same block tables) and shares the embedding and, where the
  // checkpoint has no shared_head.head, the lm_head.
  bool load_mtp = false;
  // Where full-indexer layers compute the indexer's query (wq_b over the
  // normed q latent, as q_b): IndexerQueryGemm. The same results on every
  // backend (each output column is its own dot product); engine_bench
  // --indexer-query for the A/B.
  IndexerQueryGemm indexer_query = IndexerQueryGemm::kWithQb;
};

// OK when the engine can serve `config`: the DSA cache layouts fix the MLA
// latent (kv_lora_rank 512), the RoPE part (qk_rope_head_dim 64) and the
// indexer head (index_head_dim 128). Else INVALID_ARGUMENT naming the
// values. Model::Load checks it; the daemons check it at start-up.
absl::Status CheckEngineCanServe(const ModelConfig& config);

// Per-layer top-k selections of one forward pass (cache slots), for tests.
struct ForwardTrace {
  std::map<int, std::vector<int32_t>> topk_slots;  // layer -> [T, topk]
  int topk = 0;
};

class Model {
 public:
  static absl::StatusOr<std::unique_ptr<Model>> Load(const std::string& dir, Backend* backend,
                                                     const ModelOptions& options);
  // For an already parsed config and opened checkpoint.
  static absl::StatusOr<std::unique_ptr<Model>> Load(const ModelConfig& config, const Checkpoint& checkpoint,
                                                     Backend* backend, const ModelOptions& options);

  ~Model();

  const ModelConfig& config() const { return config_; }
  bool is_first_stage() const { return first_layer_ == 0; }
  bool is_last_stage() const { return last_layer_ == config_.num_hidden_layers; }
  int64_t num_blocks() const { return options_.num_blocks; }
  Backend* backend() const { return backend_; }

  // Runs this stage on a finalized plan. The first stage embeds the plan's
  // tokens; later stages take `input` [T, hidden]. Returns the hidden state
  // [T, hidden], or on the last stage the logits [plan.logit_rows, vocab].
  // Decode steps may run as replayed CUDA graphs on the cuda backend.
  absl::StatusOr<Tensor> Forward(const StepPlan& plan, const Tensor* input, ForwardTrace* trace = nullptr);

  // ---- speculative decoding (engine/model_mtp.cc; engine/speculative.h drives it) ----
  bool has_mtp() const { return mtp_ != nullptr; }
  // Last stage: the step's final-normed hidden states of every plan row
  // [T, hidden] (what the lm_head reads, and what the MTP layer takes as
  // the main model's state, as vLLM's MTP proposer does).
  absl::StatusOr<Tensor> ForwardNormed(const StepPlan& plan, const Tensor* input);
  // The lm_head over rows of normed hidden states: logits [rows, vocab].
  absl::StatusOr<Tensor> HeadLogits(const Tensor& normed);
  // The MTP layer over a finalized plan whose tokens are the ones after
  // each row's position (row t at position p reads token p + 1 and
  // `hidden` row t, the state that predicted it): writes its caches at the
  // plan's slots and returns its output before shared_head.norm at the
  // plan's logit rows [logit rows, hidden] (the state the next draft step
  // reads).
  absl::StatusOr<Tensor> MtpForward(const StepPlan& plan, const Tensor& hidden);
  // shared_head.norm, then the head: draft logits [rows, vocab].
  absl::StatusOr<Tensor> MtpLogits(const Tensor& mtp_hidden);

 private:
  struct Layer;
  struct Mtp;
  enum class StepOutput { kLogits, kNormedHidden };
  Model() = default;
  absl::Status LoadLayer(const Checkpoint& ck, int layer);
  absl::Status LoadMtp(const Checkpoint& ck);
  absl::StatusOr<Tensor> RunForward(const StepPlan& plan, const Tensor* input, ForwardTrace* trace,
                                    StepOutput output);
  // The op sequence of one step (Forward hands it to Backend::RunStep).
  absl::StatusOr<Tensor> ForwardOps(const StepPlan& plan, const Tensor* input, ForwardTrace* trace,
                                    StepOutput output);
  // One decoder layer: x is its input and becomes its output; `residual`
  // carries the stream (empty before the first layer).
  absl::Status DecoderLayerOps(int local, const Layer& layer, Tensor* x, Tensor* residual, Tensor* topk,
                               ForwardTrace* trace);
  absl::StatusOr<Tensor> MtpOps(const StepPlan& plan, const Tensor& hidden);
  absl::StatusOr<Tensor> Attention(int local, const Layer& layer, const Tensor& h, Tensor* shared_topk,
                                   ForwardTrace* trace);

  ModelConfig config_;
  ModelOptions options_;
  Backend* backend_ = nullptr;
  int first_layer_ = 0, last_layer_ = 0;
  IndexerSpec indexer_;
  std::unique_ptr<Weight> embedding_, final_norm_, lm_head_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::unique_ptr<Mtp> mtp_;
};

}  // namespace spar

#endif  // SPAR_ENGINE_MODEL_H_
