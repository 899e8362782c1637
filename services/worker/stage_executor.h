// One pipeline stage's model execution, without threads or networking: a
// Model holding this stage's layer range on a backend, and (on the last
// stage) the per-sequence sampling states. The worker runtime calls
// Execute() for each micro-batch, in arrival order.
//
// Thread-compatible: one thread (the worker's compute thread) uses it.
#ifndef SPAR_SERVICES_WORKER_STAGE_EXECUTOR_H_
#define SPAR_SERVICES_WORKER_STAGE_EXECUTOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/backend.h"
#include "engine/cache_formats.h"
#include "engine/host_activations.h"
#include "engine/model.h"
#include "engine/speculative.h"
#include "engine/tensor_parallel.h"
#include "services/common/micro_batch.h"
#include "services/worker/constraint_states.h"
#include "services/worker/sampling_states.h"

namespace spar {

struct StageOptions {
  std::string model_dir;
  int first_layer = 0;
  int last_layer = -1;  // exclusive; -1: through the last layer
  int64_t num_blocks = 256;
  // GPU: size the KV cache to this fraction of the GPU memory instead of
  // num_blocks (0: use num_blocks); the longest sequence served (0: the
  // model's context).
  double gpu_memory_utilization = 0;
  int64_t max_model_len = 0;
  std::string backend = "cpu";
  // cuda: the GPU of this process.
  int device = 0;
  bool enforce_eager = false;  // cuda: no decode CUDA graphs
  // The cache formats (--kv-cache-dtype, --indexer-cache-dtype), resolved
  // for `backend` at load.
  CacheDtypes cache_dtypes;
  // This process's rank of the stage's tensor-parallel group and how the
  // group's all-reduce runs: cuda ranks join the NCCL communicator of
  // `nccl_unique_id`, cpu ranks share `cpu_group` (a SocketGroup between
  // worker processes). Size 1: neither.
  TpRank tp;
  std::string nccl_unique_id;
  std::shared_ptr<CpuGroup> cpu_group;
  // Benchmarks only: after each forward, sleep per held layer this long plus
  // delay_per_token per token of the micro-batch, to emulate a heavy stage
  // on a small model (pipeline-overlap measurements): a fixed cost is a
  // memory-bound decode step, a per-token cost a compute-bound one.
  absl::Duration delay_per_layer = absl::ZeroDuration();
  absl::Duration delay_per_token = absl::ZeroDuration();
  // Speculative decoding (the last stage loads the MTP layer): the most
  // drafts a sequence may verify or ask for per step; 0: none.
  int num_speculative_tokens = 0;
};

// Hidden states between stages: [rows = tokens, cols = hidden] in the
// backend's activation dtype (engine/host_activations.h).
using Activations = HostActivations;

// What one Execute() measured, for the worker's metrics (docs/metrics.md).
// `forward` and `sampling` are timed here for every backend; `allreduce`
// holds one duration per all-reduce of the step (after o_proj and after the
// MoE/MLP of each layer; Backend::TakeCollectiveDurations: NCCL on cuda, the
// CpuGroup on cpu), empty without tensor parallelism.
struct StepTimings {
  // The layers (+ final norm and lm_head on the last stage); a speculative
  // last-stage step: the verify forward, its sampling and the MTP drafting.
  absl::Duration forward = absl::ZeroDuration();
  absl::Duration sampling = absl::ZeroDuration();  // last stage
  std::vector<absl::Duration> allreduce;
};

// Device memory a stage holds (spar_gpu_memory_bytes). The cpu backend
// holds none, so zeros there; a GPU backend reports its weight and cache
// allocations through this struct.
struct StageMemory {
  int64_t weights_bytes = 0;
  int64_t kv_cache_bytes = 0;
};

struct StageOutput {
  Activations hidden;                // non-last stage
  std::vector<SampledToken> tokens;  // last stage: per sequence with logits its output tokens, in order
  std::vector<SpeculationOutcome> speculation;  // last stage: per speculative sequence with logits
  StepTimings timings;
};

class StageExecutor {
 public:
  static absl::StatusOr<std::unique_ptr<StageExecutor>> Load(const StageOptions& options);

  const ModelConfig& config() const { return model_->config(); }
  const StageOptions& options() const { return options_; }
  int first_layer() const { return options_.first_layer; }
  int last_layer() const { return last_layer_; }
  bool is_first_stage() const { return model_->is_first_stage(); }
  bool is_last_stage() const { return model_->is_last_stage(); }
  size_t num_sampling_states() const { return sampling_.size(); }
  const std::string& backend_name() const { return options_.backend; }
  // The formats the caches were allocated in.
  const CacheFormats& cache_formats() const { return cache_formats_; }
  // The backend, for AbortCollectives from another thread (a lost TP rank).
  Backend* backend() const { return backend_.get(); }
  // Device memory held: zeros on the cpu backend (host memory only).
  StageMemory device_memory() const {
    const DeviceMemoryUsage m = backend_->device_memory();
    return StageMemory{m.weights_bytes, m.cache_bytes};
  }

  // Runs one micro-batch: applies its releases and sampling (re)creations,
  // executes the forward on `input` (ignored on the first stage), and on the
  // last stage samples one token per sequence that asks for a logit, or
  // (speculative sequences) verifies their drafts and proposes new ones.
  absl::StatusOr<StageOutput> Execute(const MicroBatchPlan& plan, Activations input);
  // The last stage's MTP layer is loaded: speculation up to this many drafts.
  int num_speculative_tokens() const { return model_->has_mtp() ? options_.num_speculative_tokens : 0; }

  // Drops every sampling state (a new pipeline epoch).
  void ResetSequences() {
    sampling_.Clear();
    if (constraints_) constraints_->Clear();
  }

 private:
  StageExecutor() = default;
  // Moves the backend's all-reduce durations of this step into `timings`
  // (after the step's results were read: a GPU backend may wait for them).
  void TakeAllReduceTimes(StepTimings* timings);
  // The last stage's part of a micro-batch with speculative sequences.
  absl::Status ExecuteSpeculative(const MicroBatchPlan& plan, const StepPlan& step, const Tensor* input,
                                  StageOutput* out);
  // Constrained decoding (constraint_states.h), the last stage only: keeps
  // a sequence's constraint with its sampling state and its known tokens
  // (a prefix-cache hit's cached tokens, then the plan's tokens without
  // drafts). A constrained sequence never speculates (the MTP layer's
  // drafts are not masked): a plan asking for it is refused.
  absl::Status TrackConstraint(const PlannedSequence& p, const std::vector<int32_t>& known);
  // The token mask of a request about to be sampled; whether a sampled
  // token completes a constrained output.
  void MaskRequest(int64_t seq_id, SampleRequest* request);
  bool FinishesConstraint(int64_t seq_id, int32_t token, uint64_t step) const;

  StageOptions options_;
  int last_layer_ = 0;
  CacheFormats cache_formats_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Speculator> speculator_;  // with the MTP layer
  SamplingStates sampling_;
  std::unique_ptr<ConstraintStates> constraints_;  // last stage
};

}  // namespace spar

#endif  // SPAR_SERVICES_WORKER_STAGE_EXECUTOR_H_
