// What the cuda backend's op adapters (engine/cuda/ops/) may touch during a
// step: the stream and its stream-ordered allocations, the step's metadata
// on the device, the caches and RoPE tables, the GEMM workspace, the op
// profiler, and the work plans of the step (computed once per step, not per
// layer). The backend core owns one and refills it at every step scan; the
// adapters are free functions of it, so they form no cycle with the core.
#ifndef SPAR_ENGINE_CUDA_STEP_CONTEXT_H_
#define SPAR_ENGINE_CUDA_STEP_CONTEXT_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/cuda/branch_streams.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/device_caches.h"
#include "engine/cuda/op_profiler.h"
#include "engine/cuda/rope_tables.h"
#include "engine/step_plan.h"
#include "engine/tensor.h"
#include "kernels/cuda/attention/sparse_mla.h"
#include "kernels/cuda/common/device_info.h"
#include "kernels/cuda/indexer/topk_plan.h"

namespace spar {

// The step's plan as the kernels see it: host-side counts and device views
// of the per-token metadata (UploadStepMetadata).
struct StepMeta {
  const StepPlan* plan = nullptr;
  int64_t tokens = 0, num_seqs = 0;
  int64_t table_stride = 1;  // blocks per block-table row
  int64_t max_ctx = 0;       // longest context: the indexer's grids cover it
  // Every sequence brings this many new tokens (0: they differ); the paged
  // decode logits take them as next_n query rows per sequence (decode: 1,
  // speculative verify steps: 1 + drafts).
  int64_t tokens_per_seq = 1;
  const int32_t *ids = nullptr, *pos = nullptr, *slots = nullptr, *seq = nullptr, *kv_len = nullptr,
                *logit_rows = nullptr, *tables = nullptr;
};

class StepContext {
 public:
  // The stream the ops enqueue on: the backend's, or the side stream while
  // Concurrently runs its side branch. Set it with SetStream.
  cudaStream_t stream = nullptr;
  DeviceInfo device;
  const DeviceCaches* caches = nullptr;
  const RopeTables* rope = nullptr;
  void* gemm_workspace = nullptr;
  size_t gemm_workspace_bytes = 0;
  int tp_size = 1;
  // A device int32 the fused MoE routing launch counts its blocks with (0
  // between launches: the last block resets it).
  int32_t* moe_done_counter = nullptr;
  // kTopKMaxRowCounters device u32s, zero between launches: the row-group
  // top-k's barrier counters (TopKParams::row_counters).
  uint32_t* topk_row_counters = nullptr;
  OpProfiler* profiler = nullptr;
  BranchStreams* branches = nullptr;  // null: Concurrently runs serially
  bool overlap_branches = true;       // Backend::set_branch_overlap
  bool capturing = false;  // a graph capture is recording the ops
  std::optional<bool> widen_latent_rows;  // Backend::set_latent_widening
  StepMeta meta;

  // The stream of the ops from now on (and of the frees of the tensors that
  // die from now on).
  void SetStream(cudaStream_t s) {
    stream = s;
    *free_stream_ = s;
  }

  // Backend::RunConcurrently: `side` on the branch stream (with its own GEMM
  // workspace) and `main` on this stream, forked and joined by events, when
  // OverlapBranches says so; otherwise one after the other. Both are joined
  // whatever they return.
  absl::Status Concurrently(const std::function<absl::Status()>& side, const std::function<absl::Status()>& main);

  // The start of an op in the profile (a no-op unless profiling).
  absl::Status Mark(absl::string_view label) { return profiler->Mark(label, capturing); }
  bool profiling() const { return profiler->recording(capturing); }

  // Stream-ordered activations: allocation and free are ordered on the
  // stream, so no host synchronisation is needed and a graph capture
  // records them. A tensor is freed on the stream current when it dies: one
  // made in a side branch and read after the join dies on the main stream,
  // after its last reader; one that dies inside a branch had no reader
  // outside it.
  absl::StatusOr<Tensor> NewTensor(int64_t rows, int64_t cols, DType dtype = DType::kBF16);
  // A new [1, count] tensor holding count elements uploaded from pageable
  // host memory (staged before cudaMemcpyAsync returns: the host buffer may
  // die at once).
  absl::StatusOr<Tensor> Upload(const void* host, int64_t count, DType dtype);
  // Copies x's rows (any dtype) to dst, whose rows are ld_dst elements apart.
  absl::Status CopyRowsTo(const Tensor& x, void* dst, int64_t ld_dst);
  absl::StatusOr<Tensor> Clone(const Tensor& x);

  // Validates the plan against the caches and RoPE tables and sets the
  // host-side numbers of meta; forgets the previous step's work plans.
  absl::Status ScanPlan(const StepPlan& plan);
  // Writes the plan's per-token metadata into `dst` and points meta at it:
  // ids, positions, slots, token_seq, kv_len (= position + 1), logit rows,
  // block tables [seqs, stride]. One pageable copy ordered on the stream;
  // `dst` grows unless `may_grow` is false (a graph's fixed buffer).
  absl::Status UploadStepMetadata(const StepPlan& plan, int64_t stride, DeviceBuffer* dst, bool may_grow);

  // The step's work plans, computed on first use in a step (every layer of
  // the step has the same shapes) from the device figures read once.
  const SparseMlaPlan& SparseMlaPlanFor(int64_t tokens, int heads, int list_len, LatentFormat format);
  const TopKSplitPlan& TopKPlanFor(int64_t rows, int64_t num_cols);

 private:
  std::vector<int32_t> host_meta_;
  // Shared with every live tensor's deleter (tensors may outlive a step).
  std::shared_ptr<cudaStream_t> free_stream_ = std::make_shared<cudaStream_t>(nullptr);
  struct MlaPlanKey {
    int64_t tokens;
    int heads, list_len;
    LatentFormat format;
    bool operator==(const MlaPlanKey&) const = default;
  };
  std::optional<std::pair<MlaPlanKey, SparseMlaPlan>> mla_plan_;
  std::optional<std::pair<std::pair<int64_t, int64_t>, TopKSplitPlan>> topk_plan_;
};

}  // namespace spar

#endif  // SPAR_ENGINE_CUDA_STEP_CONTEXT_H_
