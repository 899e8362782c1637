// The in-process engine: one Model on one backend plus a block allocator
// and a simple continuous-batching loop. `spar generate --model DIR` runs
// it directly; the distributed runtime (services/) uses Model through the
// worker instead.
#ifndef SPAR_ENGINE_ENGINE_H_
#define SPAR_ENGINE_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/backend.h"
#include "engine/block_allocator.h"
#include "engine/cache_formats.h"
#include "engine/model.h"
#include "engine/speculative.h"

namespace spar {

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;       // sampling.seed is used when `seed` is set
  std::optional<uint64_t> seed;       // absent: a random seed per request
  int max_tokens = 16;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int top_logprobs = 0;
};

struct GeneratedToken {
  int32_t id = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;
};

enum class FinishReason { kLength, kStop };

struct Generation {
  std::vector<GeneratedToken> tokens;
  FinishReason finish = FinishReason::kLength;
  std::optional<int32_t> stop_token;  // the EOS / stop id that ended it (not in tokens)
};

// How the cuda backend stores the W8A16 GEMMs' FP8 / bf16 weights: row-major
// or in 16-row x 64-byte tiles ordered along K or across rows
// (kernels/cuda/gemm/w8a16_tiles.h; the values are GemmWeightLayout's).
enum class GemmWeightTiling : int { kRowMajor = 0, kAlongK = 1, kAcrossRows = 2 };

// "row-major", "along-k", "across-rows".
absl::string_view GemmWeightTilingName(GemmWeightTiling tiling);
absl::StatusOr<GemmWeightTiling> ParseGemmWeightTiling(absl::string_view name);

// Which backend to create and, for tensor parallelism, this rank's place in
// its group: cuda ranks join an NCCL communicator (one process per GPU);
// cpu ranks share a CpuGroup (threads: InProcessGroup; processes:
// SocketGroup).
struct BackendOptions {
  std::string name = "cpu";
  int device = 0;  // cuda: the GPU of this process
  TpRank tp;
  std::string nccl_unique_id;                  // cuda, tp.size > 1
  std::shared_ptr<CpuGroup> cpu_group;         // cpu, tp.size > 1
  // cuda: run every step eagerly instead of replaying decode steps as CUDA
  // graphs (vLLM's --enforce-eager; for debugging and measurements).
  bool enforce_eager = false;
  // cuda: the urgent branch of a layer's two (the indexer's selection, the
  // routed experts) on a stream of the device's highest priority, kept by the
  // decode graphs' kernel nodes, so the SMs the other branch's GEMMs free go
  // to its CTAs first (CudaBackendOptions::urgent_branch_priority). On: a
  // batch-1 GLM-5 layer 4 % faster on an H200 (bench/RESULTS.md, session 32);
  // engine_bench --no-urgent-branch turns it off for an A/B.
  bool urgent_branch_priority = true;
  // cuda: how the W8A16 GEMMs' FP8 / bf16 weights are stored
  // (CudaBackendOptions::gemm_weight_layout); engine_bench --weight-tiling.
  // Tiles across rows: on an H100 (sm80 code) the batch-1 GLM-5 layer 0.267
  // against 0.271-0.276 ms row-major, batch 8 0.900-0.908 against
  // 0.915-0.925; prefill chunks 2.3 % slower (bench/RESULTS.md, session 34).
  GemmWeightTiling gemm_weight_tiling = GemmWeightTiling::kAcrossRows;
};

struct EngineOptions {
  std::string backend = "cpu";
  // Device and tensor-parallel settings; `backend` above names the kind.
  BackendOptions backend_options;
  ModelOptions model;
  // The cache formats (--kv-cache-dtype, --indexer-cache-dtype), resolved
  // for `backend` into model.latent_format / model.indexer_format.
  CacheDtypes cache_dtypes;
  int64_t max_batch_tokens = 4096;  // prefill chunk budget per step
  // Speculative decoding with the model's MTP layer (engine/speculative.h):
  // drafts verified per step, 0 (off) to kMaxSpeculativeTokens. Outputs are
  // the ones without it.
  int num_speculative_tokens = 0;
  // Tests only: another acceptance rule, to show a wrong one is caught.
  AcceptanceRule acceptance_rule = AcceptLongestMatch;
};

// Speculative decoding's counts since the engine was created (vLLM's
// spec-decode metrics): verify steps with drafts, drafts verified, drafts
// accepted, and accepted by draft position (0 = the first draft).
struct SpeculationStats {
  int64_t num_drafts = 0;
  int64_t num_draft_tokens = 0;
  int64_t num_accepted_tokens = 0;
  std::vector<int64_t> accepted_per_position = std::vector<int64_t>(kMaxSpeculativeTokens, 0);
  // Mean tokens a verify step produced for its sequence (accepted + 1).
  double mean_acceptance_length() const {
    return num_drafts == 0 ? 0.0 : 1.0 + static_cast<double>(num_accepted_tokens) / static_cast<double>(num_drafts);
  }
};

// Validates a request against the model: non-empty prompt, ids inside the
// vocabulary, prompt + max_tokens within max_position_embeddings.
absl::Status ValidateRequest(const GenerationRequest& request, const ModelConfig& config);

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const std::string& model_dir, const EngineOptions& options);

  const ModelConfig& config() const { return model_->config(); }
  Model& model() { return *model_; }
  const BlockAllocator& allocator() const { return allocator_; }
  const SpeculationStats& speculation_stats() const { return spec_stats_; }

  // Runs the requests together until each finishes; on_token(i, token) is
  // called as request i produces each token.
  absl::StatusOr<std::vector<Generation>> Generate(
      const std::vector<GenerationRequest>& requests,
      const std::function<void(size_t, const GeneratedToken&)>& on_token = nullptr);

  // Prefills several prompts in one step and returns, per prompt, the logits
  // of its last `num_logits` positions (tests and tools).
  absl::StatusOr<std::vector<std::vector<std::vector<float>>>> PromptLogits(
      const std::vector<std::vector<int32_t>>& prompts, int num_logits, ForwardTrace* trace = nullptr,
      std::vector<std::vector<int32_t>>* block_tables = nullptr);

 private:
  struct Seq;
  Engine(std::unique_ptr<Backend> backend, std::unique_ptr<Model> model, const EngineOptions& options)
      : backend_(std::move(backend)), model_(std::move(model)), options_(options),
        allocator_(model_->num_blocks()), speculator_(model_.get(), options_.acceptance_rule) {}

  // One step's sampled tokens per plan sequence (empty where it asked for no
  // logits): plain, or speculative with the drafts it verified and proposed.
  absl::StatusOr<std::vector<std::vector<SampleResult>>> PlainStep(const StepPlan& plan,
                                                                   const std::vector<SampleRequest>& requests);
  absl::StatusOr<std::vector<SpecSequenceResult>> SpeculativeStep(const StepPlan& plan,
                                                                  const std::vector<SpecSequenceStep>& seqs);
  // Returns the blocks of `table` beyond the first `tokens` positions.
  absl::Status TrimTable(std::vector<int32_t>* table, int64_t tokens);

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  EngineOptions options_;
  BlockAllocator allocator_;
  Speculator speculator_;
  SpeculationStats spec_stats_;
};

// Creates a backend by name ("cpu", or "cuda" when built with CUDA).
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const std::string& name);
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& options);

// A fresh ncclUniqueId for rank 0 of a cuda tensor-parallel group to hand
// to the other ranks (BackendOptions.nccl_unique_id); UNIMPLEMENTED in a
// binary built without CUDA. For code that must not include CUDA headers
// (the worker daemon).
absl::StatusOr<std::string> NewNcclGroupId();

}  // namespace spar

#endif  // SPAR_ENGINE_ENGINE_H_
