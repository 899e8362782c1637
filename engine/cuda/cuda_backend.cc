// The cuda backend's core: the stream and device, the step (plan scan,
// metadata, RunStep with the decode graphs), the tensor-parallel group, and
// the hand-off of each engine op to its adapter in engine/cuda/ops/. What
// lives where:
//   device_weights  weight upload and load-time layouts
//   device_caches   the paged latent and indexer caches
//   rope_tables     RoPE tables on the device
//   step_context    what an op adapter may touch during a step
//   step_graphs     captured decode steps and their replay
//   nccl_group      NCCL collectives, abort, rejoin
//   op_profiler     per-op GPU times of eager steps
//   ops/            one adapter file per op family
#include "engine/cuda/cuda_backend.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/numeric.h"
#include "base/status_macros.h"
#include "engine/cuda/branch_streams.h"
#include "engine/cuda/device_caches.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/event_pool.h"
#include "engine/cuda/nccl_group.h"
#include "engine/cuda/op_profiler.h"
#include "engine/cuda/ops/ops.h"
#include "engine/cuda/rope_tables.h"
#include "engine/cuda/step_context.h"
#include "engine/cuda/step_graphs.h"
#include "engine/decode_graph_key.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/indexer/indexer.h"
#include "kernels/cuda/small_ops/small_ops.h"

namespace spar {
namespace {

// The persistent counters' layout: the MoE routing's int32 first, the
// top-k's row counters from here.
constexpr size_t kCounterTopKOffset = 256;

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaBackendOptions& options) : options_(options) {}
  ~CudaBackend() override {
    // Graphs first: their output allocations are freed on the stream, and
    // NCCL frees a communicator only once no graph holds its collectives.
    graphs_.reset();
    if (stream_) cudaStreamSynchronize(stream_);
    group_.reset();
    profiler_.reset();
    events_.reset();
    if (stream_) cudaStreamDestroy(stream_);
  }

  absl::Status Init() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count <= options_.device) {
      cudaGetLastError();
      return absl::FailedPreconditionError(absl::StrCat("no CUDA device ", options_.device, " (", count, " visible)"));
    }
    SPAR_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
    cudaDeviceProp prop;
    SPAR_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, options_.device));
    if (prop.major < 8) {
      return absl::FailedPreconditionError(absl::StrCat("GPU ", options_.device, " (", prop.name,
                                                        ") has compute capability ", prop.major, ".", prop.minor,
                                                        "; spar's kernels need 8.0 (Ampere) or newer"));
    }
    SPAR_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    // Keep freed activation memory in the stream-ordered pool.
    cudaMemPool_t pool;
    SPAR_CUDA_RETURN_IF_ERROR(cudaDeviceGetDefaultMemPool(&pool, options_.device));
    uint64_t threshold = UINT64_MAX;
    SPAR_CUDA_RETURN_IF_ERROR(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    SPAR_RETURN_IF_ERROR(gemm_workspace_.Allocate(kGemmWorkspaceBytes));
    SPAR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(gemm_workspace_.as<void>(), 0, kGemmWorkspaceBytes, stream_));
    // The fused MoE routing's counter, then the top-k's row counters.
    const size_t counter_bytes = kCounterTopKOffset + kTopKMaxRowCounters * sizeof(uint32_t);
    SPAR_RETURN_IF_ERROR(counters_.Allocate(counter_bytes));
    SPAR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(counters_.as<void>(), 0, counter_bytes, stream_));
    SPAR_RETURN_IF_ERROR(branches_.Init(kGemmWorkspaceBytes, stream_, options_.urgent_branch_priority));
    SPAR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    events_ = std::make_unique<EventPool>();
    profiler_ = std::make_unique<OpProfiler>(stream_, events_.get());
    graphs_ = std::make_unique<StepGraphCache>(stream_, options_.max_cuda_graphs, branches_.side_urgent());
    ctx_.SetStream(stream_);
    ctx_.branches = &branches_;
    ctx_.device = CurrentDeviceInfo();
    ctx_.caches = &caches_;
    ctx_.rope = &rope_;
    ctx_.gemm_workspace = gemm_workspace_.as<void>();
    ctx_.gemm_workspace_bytes = gemm_workspace_.bytes();
    ctx_.tp_size = options_.tp.size;
    ctx_.moe_done_counter = counters_.as<int32_t>();
    ctx_.topk_row_counters = reinterpret_cast<uint32_t*>(counters_.as<char>() + kCounterTopKOffset);
    ctx_.profiler = profiler_.get();
    SPAR_RETURN_IF_ERROR(ValidateTpRank(options_.tp));
    if (options_.tp.size > 1) {
      SPAR_ASSIGN_OR_RETURN(group_, NcclGroup::Join(options_.tp, options_.device, options_.nccl_unique_id,
                                                    options_.collective_init_timeout, stream_, events_.get()));
    }
    // Weights are what the device gains between now and the cache
    // allocation (Model::Load uploads every weight first).
    size_t free_bytes = 0, total = 0;
    SPAR_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total));
    used_at_init_ = static_cast<int64_t>(total - free_bytes);
    return absl::OkStatus();
  }

  std::string name() const override { return "cuda"; }
  TpRank tp() const override { return options_.tp; }

  DeviceMemoryUsage device_memory() const override {
    DeviceMemoryUsage m = memory_;
    m.runtime_bytes = used_at_init_;
    return m;
  }

  // ---- tensor-parallel group ----

  void AbortCollectives() override {
    // Releases the NCCL kernels waiting on the lost rank; their results are
    // garbage, which ToHost and Sample refuse from now on.
    if (group_) group_->Abort();
  }

  absl::Status RejoinGroup(const TpRendezvous& rendezvous) override {
    if (!group_) return absl::FailedPreconditionError("rejoin: this backend is not tensor-parallel");
    // The old communicator's abort finishes once no graph holds its
    // collectives, so the graphs go first (they would replay it anyway).
    group_->Abort();
    graphs_->Clear();
    SPAR_RETURN_IF_ERROR(group_->Rejoin(rendezvous.nccl_unique_id));
    options_.nccl_unique_id = rendezvous.nccl_unique_id;
    return absl::OkStatus();
  }

  absl::Status CheckNotAborted() const {
    if (group_ && group_->aborted()) {
      return absl::UnavailableError("the tensor-parallel group was aborted (a rank is gone): this stage must re-form");
    }
    return absl::OkStatus();
  }

  absl::Status AllReduceSum(Tensor* x) override {
    if (!group_) return absl::OkStatus();
    SPAR_RETURN_IF_ERROR(CheckNotAborted());
    // Ranks hand over fp32 partial sums (o_proj, MLP down and the MoE
    // combine write fp32 under TP), summed in fp32 and rounded to bf16 once,
    // as TP 1 rounds its full sums: TP 2 then differs from TP 1 only in the
    // fp32 summation order.
    if (!x->contiguous() || (x->dtype() != DType::kBF16 && x->dtype() != DType::kF32)) {
      return absl::InvalidArgumentError("all-reduce needs a contiguous bf16 or fp32 tensor");
    }
    const size_t n = static_cast<size_t>(x->rows() * x->cols());
    const bool f32 = x->dtype() == DType::kF32;
    SPAR_RETURN_IF_ERROR(ctx_.Mark("all_reduce"));
    // Inside a graph capture the timing events would become graph nodes: the
    // all-reduces of replayed steps are not timed (--enforce-eager times them).
    SPAR_RETURN_IF_ERROR(group_->AllReduceSum(x->data(), n, f32, /*timed=*/!ctx_.capturing));
    if (f32) {
      SPAR_ASSIGN_OR_RETURN(Tensor rounded, ctx_.NewTensor(x->rows(), x->cols()));
      SPAR_RETURN_IF_ERROR(
          LaunchCastF32ToBf16(x->as<float>(), static_cast<int64_t>(n), rounded.as<__nv_bfloat16>(), stream_));
      *x = rounded;
    }
    return absl::OkStatus();
  }

  CollectiveStats collective_stats() override { return group_ ? group_->Stats() : CollectiveStats(); }
  std::vector<double> TakeCollectiveDurations() override {
    return group_ ? group_->TakeDurations() : std::vector<double>();
  }

  absl::StatusOr<double> TimeWork(const std::function<absl::Status()>& work) override {
    SPAR_ASSIGN_OR_RETURN(cudaEvent_t start, events_->Take());
    SPAR_ASSIGN_OR_RETURN(cudaEvent_t end, events_->Take());
    auto recycle = [&] {
      events_->Give(start);
      events_->Give(end);
    };
    SPAR_CUDA_RETURN_IF_ERROR(cudaEventRecord(start, stream_));
    if (auto s = work(); !s.ok()) {
      recycle();
      return s;
    }
    SPAR_CUDA_RETURN_IF_ERROR(cudaEventRecord(end, stream_));
    SPAR_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(end));
    float ms = 0;
    SPAR_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start, end));
    recycle();
    return ms * 1e-3;
  }

  void set_op_profile(bool enabled) override { profiler_->set_enabled(enabled); }
  absl::StatusOr<std::vector<OpTime>> TakeOpProfile() override { return profiler_->Take(); }

  // ---- weights, RoPE, caches (load time) ----

  absl::StatusOr<std::unique_ptr<Weight>> CreateLinear(const LinearSource& src) override {
    return UploadLinear(src, GemmLayout());
  }
  absl::StatusOr<std::unique_ptr<Weight>> CreateVector(const TensorView& src) override { return UploadVector(src); }
  absl::StatusOr<std::unique_ptr<Weight>> CreateEmbedding(const TensorView& src) override {
    return UploadEmbedding(src);
  }
  absl::StatusOr<std::unique_ptr<Weight>> CreateAbsorb(const AbsorbSource& src) override { return UploadAbsorb(src); }
  absl::StatusOr<std::unique_ptr<Weight>> CreateMlp(const MlpSource& src) override { return UploadMlp(src, GemmLayout()); }
  absl::StatusOr<std::unique_ptr<Weight>> CreateMoe(const MoeSource& src) override { return UploadMoe(src, GemmLayout()); }

  absl::Status SetRope(const ref::RopeParams& params, int64_t max_positions) override {
    // The served context (the model's, or --max-model-len), unless the
    // backend options cap it.
    return rope_.Set(params, max_positions, options_.max_positions);
  }

  absl::StatusOr<int64_t> AllocateCaches(const CacheSpec& spec) override {
    return caches_.Allocate(spec, options_.latent_format, options_.indexer_format, used_at_init_, stream_, &memory_);
  }

  // ---- the step ----

  absl::Status BeginStep(const StepPlan& plan) override {
    SPAR_RETURN_IF_ERROR(ctx_.ScanPlan(plan));
    return ctx_.UploadStepMetadata(plan, ctx_.meta.table_stride, &meta_, /*may_grow=*/true);
  }

  absl::StatusOr<Tensor> RunStep(const StepPlan& plan, const Tensor* input, const StepOps& ops,
                                 const StepOptions& step) override {
    SPAR_RETURN_IF_ERROR(CheckNotAborted());
    std::optional<DecodeGraphKey> key;
    if (options_.cuda_graphs && step.replayable && (input == nullptr || input->dtype() == DType::kBF16)) {
      key = DecodeGraphKeyFor(plan, input != nullptr, step.indexer_topk,
                              GraphShapeLimits{kMaxGraphTokens, step.max_tokens_per_seq, step.indexer_heads},
                              step.graph_variant);
    }
    // Under TP, sample the all-reduce times with an eager step now and then.
    const bool sample_collectives = key && group_ && options_.collective_sample_period > 0 &&
                                    ++steps_since_collective_sample_ >= options_.collective_sample_period;
    if (sample_collectives) steps_since_collective_sample_ = 0;
    auto run_eagerly = [&]() -> absl::StatusOr<Tensor> {
      graphs_->CountEagerStep();
      SPAR_RETURN_IF_ERROR(BeginStep(plan));
      return ops(input);
    };
    if (!key || graphs_->Uncapturable(*key) || sample_collectives) return run_eagerly();
    SPAR_RETURN_IF_ERROR(ctx_.ScanPlan(plan));
    DecodeGraph* g = graphs_->Find(*key);
    if (g != nullptr) {
      SPAR_RETURN_IF_ERROR(ctx_.UploadStepMetadata(plan, key->table_stride, &g->meta, /*may_grow=*/false));
      if (input != nullptr) SPAR_RETURN_IF_ERROR(ctx_.CopyRowsTo(*input, g->input.as<void>(), input->cols()));
    } else {
      SPAR_ASSIGN_OR_RETURN(g, Capture(*key, plan, input, ops));
      if (g == nullptr) return run_eagerly();  // not capturable: this shape runs eagerly from now on
    }
    SPAR_RETURN_IF_ERROR(graphs_->Launch(g));
    // Hand out a copy: the graph's output buffer is reallocated by its next
    // launch, while a caller may keep the result.
    return ctx_.Clone(g->output);
  }

  void set_step_replay(bool enabled) override { options_.cuda_graphs = enabled; }
  absl::Status RunConcurrently(const std::function<absl::Status()>& side,
                               const std::function<absl::Status()>& main) override {
    return ctx_.Concurrently(side, main);
  }
  void set_branch_overlap(bool enabled) override {
    if (enabled == ctx_.overlap_branches) return;
    // The graphs recorded the other way would replay it.
    cudaStreamSynchronize(stream_);
    graphs_->Clear();
    ctx_.overlap_branches = enabled;
  }
  // Never used in a graph capture (the widening is for prefill steps), so
  // the recorded graphs stay valid.
  void set_latent_widening(std::optional<bool> forced) override { ctx_.widen_latent_rows = forced; }
  StepGraphStats graph_stats() const override { return graphs_->stats(); }

  // ---- ops: the adapters of engine/cuda/ops ----

  absl::StatusOr<Tensor> Embed(const Weight& table) override {
    return cuda_ops::Embed(ctx_, As<CudaEmbedding>(table));
  }
  absl::StatusOr<Tensor> Linear(const Tensor& x, const Weight& w) override {
    return cuda_ops::Linear(ctx_, x, As<CudaLinear>(w));
  }
  absl::StatusOr<Tensor> RmsNorm(const Tensor& x, const Weight& w, float eps) override {
    return cuda_ops::RmsNorm(ctx_, x, nullptr, As<CudaVector>(w), eps);
  }
  absl::StatusOr<Tensor> AddRmsNorm(Tensor* residual, const Tensor& x, const Weight& w, float eps) override {
    if (residual->empty()) {
      SPAR_RETURN_IF_ERROR(ctx_.Mark("residual_copy"));
      SPAR_ASSIGN_OR_RETURN(*residual, ctx_.Clone(x));
      return cuda_ops::RmsNorm(ctx_, *residual, nullptr, As<CudaVector>(w), eps);
    }
    return cuda_ops::RmsNorm(ctx_, x, residual, As<CudaVector>(w), eps);
  }
  absl::Status AddInPlace(Tensor* acc, const Tensor& x) override { return cuda_ops::AddInPlace(ctx_, acc, x); }
  absl::StatusOr<Tensor> Mlp(const Tensor& x, const Weight& w) override {
    return cuda_ops::Mlp(ctx_, x, As<CudaMlp>(w));
  }
  absl::StatusOr<Tensor> Moe(const Tensor& x, const Weight& w) override {
    return cuda_ops::Moe(ctx_, x, As<CudaMoe>(w));
  }
  absl::StatusOr<Tensor> GatherRows(const Tensor& x, const std::vector<int32_t>& rows) override {
    return cuda_ops::GatherRows(ctx_, x, rows);
  }
  absl::Status ZeroRows(Tensor* x, const std::vector<int32_t>& rows) override {
    return cuda_ops::ZeroRows(ctx_, x, rows);
  }
  absl::Status WriteLatentCache(int layer, const Tensor& kv_a, const Weight& kv_a_norm, float eps) override {
    return cuda_ops::WriteLatentCache(ctx_, layer, kv_a, As<CudaVector>(kv_a_norm), eps);
  }
  absl::StatusOr<Tensor> AbsorbQuery(const Tensor& q, const Weight& absorb) override {
    return cuda_ops::AbsorbQuery(ctx_, q, As<CudaAbsorb>(absorb));
  }
  absl::StatusOr<Tensor> WriteLatentCacheAndAbsorbQuery(int layer, const Tensor& kv_a, const Weight& kv_a_norm,
                                                        float eps, const Tensor& q, const Weight& absorb) override {
    return cuda_ops::WriteLatentCacheAndAbsorbQuery(ctx_, layer, kv_a, As<CudaVector>(kv_a_norm), eps, q,
                                                    As<CudaAbsorb>(absorb));
  }
  absl::Status WriteIndexerCache(int layer, const Tensor& k, const Weight& norm_w, const Weight& norm_b, float eps,
                                 const IndexerSpec& spec) override {
    return cuda_ops::WriteIndexerCache(ctx_, layer, k, As<CudaVector>(norm_w), As<CudaVector>(norm_b), eps, spec);
  }
  absl::StatusOr<Tensor> RmsNormAndWriteIndexerCache(const Tensor& x, const Weight& w, float eps, int layer,
                                                     const Tensor& k, const Weight& k_norm_w, const Weight& k_norm_b,
                                                     float k_eps, const IndexerSpec& spec) override {
    return cuda_ops::RmsNormAndWriteIndexerCache(ctx_, x, As<CudaVector>(w), eps, layer, k, As<CudaVector>(k_norm_w),
                                                 As<CudaVector>(k_norm_b), k_eps, spec);
  }
  absl::StatusOr<Tensor> IndexerTopK(int layer, const Tensor& q, const Tensor& w, const IndexerSpec& spec) override {
    return cuda_ops::IndexerTopK(ctx_, layer, q, w, spec);
  }
  absl::StatusOr<Tensor> SparseMla(int layer, const Tensor& q_abs, const Tensor& indices, float scale) override {
    return cuda_ops::SparseMla(ctx_, layer, q_abs, indices, scale);
  }
  absl::StatusOr<Tensor> UnabsorbOutput(const Tensor& o_lat, const Weight& absorb) override {
    return cuda_ops::UnabsorbOutput(ctx_, o_lat, As<CudaAbsorb>(absorb));
  }
  absl::StatusOr<Tensor> AttendAndUnabsorb(int layer, const Tensor& q_abs, const Tensor& indices, float scale,
                                           const Weight& absorb) override {
    return cuda_ops::AttendAndUnabsorb(ctx_, layer, q_abs, indices, scale, As<CudaAbsorb>(absorb));
  }

  absl::StatusOr<std::vector<SampleResult>> Sample(const Tensor& logits,
                                                   const std::vector<SampleRequest>& requests) override {
    SPAR_ASSIGN_OR_RETURN(std::vector<SampleResult> out, cuda_ops::Sample(ctx_, logits, requests));
    SPAR_RETURN_IF_ERROR(CheckNotAborted());  // samples of an aborted step are garbage
    return out;
  }

  // ---- host transfers ----

  absl::StatusOr<std::vector<float>> ToHost(const Tensor& x) override {
    const size_t n = static_cast<size_t>(x.rows() * x.cols());
    const size_t elem = DTypeSize(x.dtype());
    std::vector<uint8_t> raw(n * elem);
    SPAR_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(raw.data(), x.cols() * elem, x.data(), x.ld() * elem, x.cols() * elem,
                                                x.rows(), cudaMemcpyDeviceToHost, stream_));
    SPAR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    SPAR_RETURN_IF_ERROR(CheckNotAborted());  // hidden states of an aborted step are garbage
    std::vector<float> out(n);
    for (size_t i = 0; i < n; ++i) {
      switch (x.dtype()) {
        case DType::kF32:
          std::memcpy(&out[i], raw.data() + 4 * i, 4);
          break;
        case DType::kBF16: {
          uint16_t b;
          std::memcpy(&b, raw.data() + 2 * i, 2);
          out[i] = Bf16ToFloat(b);
          break;
        }
        case DType::kI32: {
          int32_t v;
          std::memcpy(&v, raw.data() + 4 * i, 4);
          out[i] = static_cast<float>(v);
          break;
        }
        default:
          return absl::InvalidArgumentError("to host: unsupported dtype");
      }
    }
    return out;
  }

  // bf16 activations cross a hop as bf16 bytes: one copy each way.
  absl::StatusOr<HostActivations> ToHostActivations(const Tensor& x) override {
    if (x.dtype() != DType::kBF16 && x.dtype() != DType::kF32) {
      return absl::InvalidArgumentError("activations must be bf16 or fp32");
    }
    HostActivations out;
    out.dtype = x.dtype();
    out.rows = x.rows();
    out.cols = x.cols();
    const size_t elem = DTypeSize(x.dtype());
    out.bytes.resize(static_cast<size_t>(x.rows() * x.cols()) * elem);
    SPAR_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(out.bytes.data(), x.cols() * elem, x.data(), x.ld() * elem,
                                                x.cols() * elem, x.rows(), cudaMemcpyDeviceToHost, stream_));
    SPAR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    SPAR_RETURN_IF_ERROR(CheckNotAborted());  // hidden states of an aborted step are garbage
    return out;
  }

  absl::StatusOr<Tensor> FromHostActivations(const HostActivations& x) override {
    SPAR_RETURN_IF_ERROR(x.Check());
    if (x.dtype != DType::kBF16) return FromHost(x.ToFloats(), x.rows, x.cols);  // fp32 from a cpu stage
    SPAR_ASSIGN_OR_RETURN(Tensor t, ctx_.NewTensor(x.rows, x.cols));
    SPAR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(t.data(), x.bytes.data(), x.bytes.size(), cudaMemcpyHostToDevice, stream_));
    SPAR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));  // the host bytes may die on return
    return t;
  }

  absl::StatusOr<Tensor> FromHost(const std::vector<float>& data, int64_t rows, int64_t cols) override {
    if (static_cast<int64_t>(data.size()) != rows * cols) return absl::InvalidArgumentError("from host: size mismatch");
    SPAR_ASSIGN_OR_RETURN(Tensor x, ctx_.NewTensor(rows, cols));
    std::vector<uint16_t> b(data.size());
    for (size_t i = 0; i < data.size(); ++i) b[i] = FloatToBf16(data[i]);
    SPAR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(x.data(), b.data(), b.size() * 2, cudaMemcpyHostToDevice, stream_));
    SPAR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return x;
  }

 private:
  GemmWeightLayout GemmLayout() const { return options_.gemm_weight_layout; }

  static constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;
  // Larger decode batches gain little from a graph (their kernels are long).
  static constexpr int64_t kMaxGraphTokens = 512;

  // Records `ops` for this step shape into a new graph (ScanPlan done).
  absl::StatusOr<DecodeGraph*> Capture(const DecodeGraphKey& key, const StepPlan& plan, const Tensor* input,
                                       const StepOps& ops) {
    Tensor in;
    auto prepare = [&](DecodeGraph* g) -> absl::Status {
      SPAR_RETURN_IF_ERROR(ctx_.UploadStepMetadata(plan, key.table_stride, &g->meta, /*may_grow=*/true));
      // Grids sized for the whole bucket: the kernels stop at each row's length.
      if (!key.select_all) ctx_.meta.max_ctx = std::max<int64_t>(ctx_.meta.max_ctx, key.max_context());
      if (input != nullptr) {
        SPAR_RETURN_IF_ERROR(g->input.Allocate(static_cast<size_t>(input->rows() * input->cols()) * 2));
        SPAR_RETURN_IF_ERROR(ctx_.CopyRowsTo(*input, g->input.as<void>(), input->cols()));
        in = Tensor(DType::kBF16, input->rows(), input->cols(), nullptr, g->input.as<void>(), input->cols());
      }
      return absl::OkStatus();
    };
    auto record = [&]() { return ops(input != nullptr ? &in : nullptr); };
    return graphs_->Capture(key, prepare, record, &ctx_.capturing);
  }

  CudaBackendOptions options_;
  cudaStream_t stream_ = nullptr;
  int64_t used_at_init_ = 0;
  DeviceMemoryUsage memory_;
  DeviceBuffer gemm_workspace_;
  DeviceBuffer counters_;  // zeroed device counters the kernels leave at zero (the MoE routing's, the top-k's)
  BranchStreams branches_;  // RunConcurrently's side stream
  RopeTables rope_;
  DeviceCaches caches_;
  std::unique_ptr<EventPool> events_;
  std::unique_ptr<OpProfiler> profiler_;
  std::unique_ptr<NcclGroup> group_;  // tensor parallel only
  std::unique_ptr<StepGraphCache> graphs_;
  StepContext ctx_;
  DeviceBuffer meta_;  // the eager steps' metadata
  int steps_since_collective_sample_ = 0;
};

}  // namespace

absl::StatusOr<std::string> NewNcclUniqueId() {
  ncclUniqueId id;
  const ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) return absl::UnavailableError(absl::StrCat("ncclGetUniqueId: ", ncclGetErrorString(r)));
  return std::string(id.internal, sizeof(id.internal));
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& options) {
  auto backend = std::make_unique<CudaBackend>(options);
  SPAR_RETURN_IF_ERROR(backend->Init());
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace spar
