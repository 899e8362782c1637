#include "engine/cuda/cuda_backend.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/numeric.h"
#include "base/status_macros.h"
#include "engine/cuda/glue_kernels.h"
#include "engine/decode_graph_key.h"
#include "engine/memory_budget.h"
#include "engine/weight_convert.h"
#include "kernels/cuda/attention/absorb_gemm.h"
#include "kernels/cuda/attention/mla_cache.h"
#include "kernels/cuda/attention/sampling.h"
#include "kernels/cuda/attention/small_ops.h"
#include "kernels/cuda/attention/sparse_mla.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/gemm/moe.h"
#include "kernels/cuda/gemm/w8a16_gemm.h"
#include "kernels/cuda/indexer/indexer.h"
#include "kernels/ref/rope_ref.h"

namespace spar {
namespace {

// ---------------------------------------------------------------- memory

// A cudaMalloc'd buffer for weights, caches and fixed workspaces.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  absl::Status Allocate(size_t bytes) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = bytes;
    if (bytes == 0) return absl::OkStatus();
    SPAR_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr_, bytes));
    return absl::OkStatus();
  }
  // With a stream the copy is ordered on it (the backend's stream is
  // non-blocking, so a plain cudaMemcpy would race with its kernels: a
  // pageable copy may return before its DMA lands). Without one the copy has
  // completed on return.
  absl::Status Upload(const void* host, size_t bytes, cudaStream_t stream = nullptr) {
    SPAR_RETURN_IF_ERROR(Allocate(bytes));
    if (bytes == 0) return absl::OkStatus();
    if (stream != nullptr) {
      SPAR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(ptr_, host, bytes, cudaMemcpyHostToDevice, stream));
    } else {
      SPAR_CUDA_RETURN_IF_ERROR(cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice));
      SPAR_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
    }
    return absl::OkStatus();
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// ---------------------------------------------------------------- host conversion

std::vector<uint16_t> ToBf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = FloatToBf16(v[i]);
  return out;
}

// ---------------------------------------------------------------- weights

struct CudaMatrix {
  GemmWeight gemm;  // pointers into the buffers below
  int64_t cols = 0;
  DeviceBuffer values, scales;
};

// FP8 weights stay FP8 on the GPU when the slice keeps whole 128x128 scale
// blocks (always true for the real models' TP splits); other slices (tiny
// test models) are dequantized to bf16, which the GEMM takes as well.
bool KeepsScaleBlocks(const MatrixSource& m) {
  const int64_t rows = m.weight.shape[0], cols = m.weight.shape[1];
  const int64_t r1 = m.row_end < 0 ? rows : m.row_end, c1 = m.col_end < 0 ? cols : m.col_end;
  return m.scale_inv && m.row_begin % 128 == 0 && m.col_begin % 128 == 0 && (r1 % 128 == 0 || r1 == rows) &&
         (c1 % 128 == 0 || c1 == cols);
}

absl::Status UploadMatrix(const MatrixSource& m, CudaMatrix* out) {
  const int64_t rows = m.rows(), cols = m.cols();
  out->cols = cols;
  out->gemm.n = rows;
  if (m.weight.dtype == DType::kF8E4M3 && KeepsScaleBlocks(m)) {
    const int64_t full_cols = m.weight.shape[1];
    const int64_t full_scols = (full_cols + 127) / 128, scols = (cols + 127) / 128, srows = (rows + 127) / 128;
    if (rows < 0 || cols < 0 || m.row_begin + rows > m.weight.shape[0] || m.col_begin + cols > full_cols) {
      return absl::InvalidArgumentError(absl::StrCat("tensor \"", m.weight.name, "\": slice out of bounds"));
    }
    std::vector<uint8_t> values(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(values.data() + r * cols, m.weight.data + (m.row_begin + r) * full_cols + m.col_begin, cols);
    }
    std::vector<float> scales(static_cast<size_t>(srows * scols));
    const float* s = reinterpret_cast<const float*>(m.scale_inv->data);
    for (int64_t r = 0; r < srows; ++r) {
      std::memcpy(scales.data() + r * scols, s + (m.row_begin / 128 + r) * full_scols + m.col_begin / 128, scols * 4);
    }
    SPAR_RETURN_IF_ERROR(out->values.Upload(values.data(), values.size()));
    SPAR_RETURN_IF_ERROR(out->scales.Upload(scales.data(), scales.size() * 4));
    out->gemm.type = GemmWeightType::kFp8Block128;
    out->gemm.data = out->values.as<void>();
    out->gemm.scale = out->scales.as<float>();
    return absl::OkStatus();
  }
  SPAR_ASSIGN_OR_RETURN(std::vector<float> f, MatrixToFloat(m));
  const auto b = ToBf16(f);
  SPAR_RETURN_IF_ERROR(out->values.Upload(b.data(), b.size() * 2));
  out->gemm.type = GemmWeightType::kBf16;
  out->gemm.data = out->values.as<void>();
  out->gemm.scale = nullptr;
  return absl::OkStatus();
}

// A matrix as bf16 [rows_out, cols_out]: the source in the top-left corner,
// zeros elsewhere.
absl::Status UploadPaddedBf16(const MatrixSource& m, int64_t rows_out, int64_t cols_out, CudaMatrix* out) {
  SPAR_ASSIGN_OR_RETURN(std::vector<float> f, MatrixToFloat(m));
  const int64_t rows = m.rows(), cols = m.cols();
  std::vector<float> padded(static_cast<size_t>(rows_out * cols_out), 0.0f);
  for (int64_t r = 0; r < rows; ++r) std::memcpy(padded.data() + r * cols_out, f.data() + r * cols, cols * 4);
  const auto b = ToBf16(padded);
  SPAR_RETURN_IF_ERROR(out->values.Upload(b.data(), b.size() * 2));
  out->cols = cols_out;
  out->gemm.n = rows_out;
  out->gemm.type = GemmWeightType::kBf16;
  out->gemm.data = out->values.as<void>();
  out->gemm.scale = nullptr;
  return absl::OkStatus();
}

struct CudaLinear : Weight {
  std::vector<std::unique_ptr<CudaMatrix>> parts;
  int64_t n_total = 0, k = 0;
  bool fp32_out = false;  // logits
};

struct CudaVector : Weight {
  DeviceBuffer bf16, f32;
  int64_t n = 0;
};

struct CudaEmbedding : Weight {
  DeviceBuffer table;
  int64_t vocab = 0, dim = 0;
};

struct CudaAbsorb : Weight {
  DeviceBuffer kv_b;  // bf16 [heads, nope + v, 512]
  MlaAbsorbWeights w;
};

struct CudaMlp : Weight {
  CudaMatrix gate, up, down;
  int64_t inter = 0;
};

// The GEMMs need K (the down projection's input) to be a multiple of 64. A
// tensor-parallel slice of a small MLP may not be (the tiny models' shared
// expert: 192 / 2 = 96): pad the intermediate dimension with zero rows of
// gate/up and zero columns of down, which adds exactly nothing.
absl::Status UploadMlp(const MlpSource& src, CudaMlp* m) {
  const int64_t inter = src.gate.rows();
  const int64_t padded = (inter + 63) / 64 * 64;
  if (padded == inter) {
    SPAR_RETURN_IF_ERROR(UploadMatrix(src.gate, &m->gate));
    SPAR_RETURN_IF_ERROR(UploadMatrix(src.up, &m->up));
    SPAR_RETURN_IF_ERROR(UploadMatrix(src.down, &m->down));
  } else {
    SPAR_RETURN_IF_ERROR(UploadPaddedBf16(src.gate, padded, src.gate.cols(), &m->gate));
    SPAR_RETURN_IF_ERROR(UploadPaddedBf16(src.up, padded, src.up.cols(), &m->up));
    SPAR_RETURN_IF_ERROR(UploadPaddedBf16(src.down, src.down.rows(), padded, &m->down));
  }
  m->inter = m->gate.gemm.n;
  if (m->gate.gemm.type != m->up.gemm.type) return absl::InvalidArgumentError("MLP gate and up differ in dtype");
  return absl::OkStatus();
}

// Local experts' projections packed [E, n, k] (+ scales [E, n/128, k/128]).
struct PackedExperts {
  DeviceBuffer values, scales;
  GemmWeight first;  // expert 0
  int64_t weight_stride = 0, scale_stride = 0;
};

struct CudaMoe : Weight {
  CudaMatrix router;  // bf16 [E, hidden]
  DeviceBuffer bias;  // f32 [E]
  PackedExperts gate, up, down;
  int num_local = 0, expert_begin = 0;
  int64_t inter = 0, hidden = 0;
  std::unique_ptr<CudaMlp> shared;
  MoeRouteParams route;  // shapes and routing constants
};

absl::Status PackExperts(const std::vector<const MatrixSource*>& mats, PackedExperts* out) {
  const int64_t rows = mats[0]->rows(), cols = mats[0]->cols();
  const bool fp8 = mats[0]->weight.dtype == DType::kF8E4M3;
  const int64_t srows = (rows + 127) / 128, scols = (cols + 127) / 128;
  std::vector<uint8_t> values;
  std::vector<float> scales;
  for (const MatrixSource* m : mats) {
    if (m->rows() != rows || m->cols() != cols || (m->weight.dtype == DType::kF8E4M3) != fp8) {
      return absl::InvalidArgumentError(absl::StrCat("expert tensor \"", m->weight.name, "\" differs from expert 0"));
    }
    if (fp8) {
      values.insert(values.end(), m->weight.data, m->weight.data + rows * cols);
      const float* s = reinterpret_cast<const float*>(m->scale_inv->data);
      scales.insert(scales.end(), s, s + srows * scols);
    } else {
      SPAR_ASSIGN_OR_RETURN(std::vector<float> f, MatrixToFloat(*m));
      const auto b = ToBf16(f);
      const auto* bytes = reinterpret_cast<const uint8_t*>(b.data());
      values.insert(values.end(), bytes, bytes + b.size() * 2);
    }
  }
  SPAR_RETURN_IF_ERROR(out->values.Upload(values.data(), values.size()));
  out->first.n = rows;
  out->weight_stride = rows * cols;
  if (fp8) {
    SPAR_RETURN_IF_ERROR(out->scales.Upload(scales.data(), scales.size() * 4));
    out->first.type = GemmWeightType::kFp8Block128;
    out->first.scale = out->scales.as<float>();
    out->scale_stride = srows * scols;
  } else {
    out->first.type = GemmWeightType::kBf16;
  }
  out->first.data = out->values.as<void>();
  return absl::OkStatus();
}

template <typename T>
const T& As(const Weight& w) {
  return static_cast<const T&>(w);
}

const __nv_bfloat16* Bf16(const Tensor& t) { return t.as<__nv_bfloat16>(); }
__nv_bfloat16* Bf16Mut(const Tensor& t) { return t.as<__nv_bfloat16>(); }

// ---------------------------------------------------------------- decode graphs

// One captured decode step: the executable graph and the fixed buffers its
// kernels read (step metadata, stage input); its output lives in memory the
// graph allocates on every launch (freed automatically at the next one).
struct DecodeGraph {
  cudaGraphExec_t exec = nullptr;
  DeviceBuffer meta, input;
  Tensor output;  // the captured output tensor: the graph's allocation
  uint64_t last_used = 0;
  ~DecodeGraph() {
    output = Tensor();  // frees the graph's output allocation (stream-ordered)
    if (exec) cudaGraphExecDestroy(exec);
  }
};

// ncclCommAbort on a thread of its own: it returns only once no CUDA graph
// holds the communicator's collectives any more.
class CommAbort {
 public:
  static std::shared_ptr<CommAbort> Start(ncclComm_t comm) {
    auto self = std::make_shared<CommAbort>();
    // Detached and sharing `self`: a destructor that gives up waiting
    // (WaitFor) must not block on a join.
    std::thread([self, comm] {
      ncclCommAbort(comm);
      absl::MutexLock lock(&self->mu_);
      self->done_ = true;
    }).detach();
    return self;
  }
  // True once the abort has finished.
  bool WaitFor(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&done_), timeout);
  }

 private:
  absl::Mutex mu_;
  bool done_ = false;
};

// ---------------------------------------------------------------- backend

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaBackendOptions& options) : options_(options) {}
  ~CudaBackend() override {
    // Graphs first: their output allocations are freed on the stream, and
    // NCCL frees a communicator only once no graph holds its collectives.
    graphs_.clear();
    if (stream_) cudaStreamSynchronize(stream_);
    if (comm_ != nullptr && !aborted_.load()) ncclCommDestroy(comm_);
    // An aborted communicator is freed by its abort thread, which could
    // finish only now that the graphs are gone.
    if (comm_abort_ != nullptr && !comm_abort_->WaitFor(absl::Seconds(30))) {
      std::fprintf(stderr, "cuda backend: the aborted NCCL communicator was not freed within 30 s; left behind\n");
    }
    for (cudaEvent_t e : all_events_) cudaEventDestroy(e);
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
    device_name_ = prop.name;
    SPAR_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    // Keep freed activation memory in the stream-ordered pool.
    cudaMemPool_t pool;
    SPAR_CUDA_RETURN_IF_ERROR(cudaDeviceGetDefaultMemPool(&pool, options_.device));
    uint64_t threshold = UINT64_MAX;
    SPAR_CUDA_RETURN_IF_ERROR(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    SPAR_RETURN_IF_ERROR(gemm_workspace_.Allocate(kGemmWorkspaceBytes));
    SPAR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(gemm_workspace_.as<void>(), 0, kGemmWorkspaceBytes, stream_));
    SPAR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    SPAR_RETURN_IF_ERROR(InitTensorParallel());
    // Weights are what the device gains between now and the cache
    // allocation (Model::Load uploads every weight first).
    size_t free_bytes = 0, total = 0;
    SPAR_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total));
    used_at_init_ = static_cast<int64_t>(total - free_bytes);
    return absl::OkStatus();
  }

  DeviceMemoryUsage device_memory() const override {
    DeviceMemoryUsage m = memory_;
    m.runtime_bytes = used_at_init_;
    return m;
  }

  std::string name() const override { return "cuda"; }
  TpRank tp() const override { return options_.tp; }

  void AbortCollectives() override {
    if (options_.tp.size == 1 || aborted_.exchange(true)) return;
    // Releases the NCCL kernels waiting on the lost rank; their results are
    // garbage, which ToHost and Sample refuse from now on. ncclCommAbort
    // raises the abort flag at once but then (NCCL >= 2.26) blocks until
    // every CUDA graph that captured one of the communicator's collectives
    // is destroyed — ours die with this backend, usually on another thread
    // — so the abort runs on a thread of its own and the destructor waits.
    if (comm_ != nullptr) comm_abort_ = CommAbort::Start(comm_);
  }

  absl::Status RejoinGroup(const TpRendezvous& group) override {
    if (options_.tp.size == 1) return absl::FailedPreconditionError("rejoin: this backend is not tensor-parallel");
    // The old communicator goes first: it is aborted (a no-op if it was),
    // and its abort finishes once no graph holds its collectives — so the
    // graphs go too (they would replay the old communicator anyway).
    AbortCollectives();
    graphs_.clear();
    uncapturable_.clear();
    SPAR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    if (comm_abort_ != nullptr && !comm_abort_->WaitFor(absl::Seconds(30))) {
      return absl::DeadlineExceededError("rejoin: the old NCCL communicator's abort did not finish within 30 s");
    }
    comm_abort_.reset();
    comm_ = nullptr;
    collective_stats();  // resolve the old group's pending timing events
    recent_collectives_.clear();
    options_.nccl_unique_id = group.nccl_unique_id;
    SPAR_RETURN_IF_ERROR(InitTensorParallel());
    aborted_.store(false);
    return absl::OkStatus();
  }

  absl::Status CheckNotAborted() const {
    if (aborted_.load()) {
      return absl::UnavailableError("the tensor-parallel group was aborted (a rank is gone): this stage must re-form");
    }
    return absl::OkStatus();
  }

  absl::Status AllReduceSum(Tensor* x) override {
    if (options_.tp.size == 1) return absl::OkStatus();
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
    SPAR_RETURN_IF_ERROR(MarkOp("all_reduce"));
    // Inside a graph capture the events would become graph nodes: the
    // all-reduces of replayed steps are not timed (--enforce-eager times them).
    TimedSpan span;
    if (!capturing_) {
      SPAR_ASSIGN_OR_RETURN(span, StartSpan());
    }
    const ncclResult_t r =
        ncclAllReduce(x->data(), x->data(), n, f32 ? ncclFloat32 : ncclBfloat16, ncclSum, comm_, stream_);
    if (r != ncclSuccess) return absl::InternalError(absl::StrCat("ncclAllReduce: ", ncclGetErrorString(r)));
    if (!capturing_) {
      SPAR_CUDA_RETURN_IF_ERROR(cudaEventRecord(span.end, stream_));
      pending_spans_.push_back(span);
      stats_.calls += 1;
      stats_.bytes += static_cast<int64_t>(n * (f32 ? 4 : 2));
    }
    if (f32) {
      SPAR_ASSIGN_OR_RETURN(Tensor rounded, NewTensor(x->rows(), x->cols()));
      SPAR_RETURN_IF_ERROR(glue::F32ToBf16(x->as<float>(), static_cast<int64_t>(n), rounded.as<uint16_t>(), stream_));
      *x = rounded;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<double> TimeWork(const std::function<absl::Status()>& work) override {
    SPAR_ASSIGN_OR_RETURN(cudaEvent_t start, TakeEvent());
    SPAR_ASSIGN_OR_RETURN(cudaEvent_t end, TakeEvent());
    auto recycle = [&] {
      free_events_.push_back(start);
      free_events_.push_back(end);
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

  CollectiveStats collective_stats() override {
    for (const TimedSpan& s : pending_spans_) {
      float ms = 0;
      if (cudaEventSynchronize(s.end) == cudaSuccess && cudaEventElapsedTime(&ms, s.start, s.end) == cudaSuccess) {
        stats_.seconds += ms * 1e-3;
        if (recent_collectives_.size() < kMaxRecentCollectives) recent_collectives_.push_back(ms * 1e-3);
      }
      free_events_.push_back(s.start);
      free_events_.push_back(s.end);
    }
    pending_spans_.clear();
    return stats_;
  }

  std::vector<double> TakeCollectiveDurations() override {
    collective_stats();
    std::vector<double> out;
    out.swap(recent_collectives_);
    return out;
  }

  void set_op_profile(bool enabled) override { op_profile_ = enabled; }

  absl::StatusOr<std::vector<OpTime>> TakeOpProfile() override {
    std::vector<OpTime> out;
    if (op_marks_.empty()) return out;
    SPAR_ASSIGN_OR_RETURN(cudaEvent_t end, TakeEvent());
    SPAR_CUDA_RETURN_IF_ERROR(cudaEventRecord(end, stream_));
    SPAR_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(end));
    for (size_t i = 0; i < op_marks_.size(); ++i) {
      const cudaEvent_t next = i + 1 < op_marks_.size() ? op_marks_[i + 1].second : end;
      float ms = 0;
      SPAR_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, op_marks_[i].second, next));
      out.push_back(OpTime{op_marks_[i].first, ms * 1e-3});
      free_events_.push_back(op_marks_[i].second);
    }
    free_events_.push_back(end);
    op_marks_.clear();
    return out;
  }

  // The start of an op (and the end of the previous one) while profiling.
  // The first mark of a step sits behind a 2 ms GPU wait, so the host
  // enqueues the step while the GPU is busy and host gaps do not count.
  absl::Status MarkOp(absl::string_view label) {
    if (!op_profile_ || capturing_) return absl::OkStatus();
    if (op_marks_.empty()) SPAR_RETURN_IF_ERROR(glue::SpinWait(2'000'000, stream_));
    SPAR_ASSIGN_OR_RETURN(cudaEvent_t e, TakeEvent());
    SPAR_CUDA_RETURN_IF_ERROR(cudaEventRecord(e, stream_));
    op_marks_.emplace_back(std::string(label), e);
    return absl::OkStatus();
  }

  // ---- weights ----

  absl::StatusOr<std::unique_ptr<Weight>> CreateLinear(const LinearSource& src) override {
    if (src.parts.empty() || src.parts.size() > static_cast<size_t>(gemm::kMaxGemmSegments)) {
      return absl::InvalidArgumentError(absl::StrCat("linear: ", src.parts.size(), " parts (1..",
                                                     gemm::kMaxGemmSegments, " supported)"));
    }
    auto lin = std::make_unique<CudaLinear>();
    for (const auto& p : src.parts) {
      auto m = std::make_unique<CudaMatrix>();
      SPAR_RETURN_IF_ERROR(UploadMatrix(p, m.get()));
      if (lin->k != 0 && m->cols != lin->k) return absl::InvalidArgumentError("linear: parts differ in columns");
      lin->k = m->cols;
      lin->n_total += m->gemm.n;
      lin->parts.push_back(std::move(m));
    }
    lin->fp32_out = src.fp32_output;
    return std::unique_ptr<Weight>(std::move(lin));
  }

  absl::StatusOr<std::unique_ptr<Weight>> CreateVector(const TensorView& src) override {
    auto v = std::make_unique<CudaVector>();
    SPAR_ASSIGN_OR_RETURN(std::vector<float> f, TensorToFloat(src));
    v->n = static_cast<int64_t>(f.size());
    const auto b = ToBf16(f);
    SPAR_RETURN_IF_ERROR(v->bf16.Upload(b.data(), b.size() * 2));
    SPAR_RETURN_IF_ERROR(v->f32.Upload(f.data(), f.size() * 4));
    return std::unique_ptr<Weight>(std::move(v));
  }

  absl::StatusOr<std::unique_ptr<Weight>> CreateEmbedding(const TensorView& src) override {
    auto e = std::make_unique<CudaEmbedding>();
    SPAR_ASSIGN_OR_RETURN(std::vector<float> f, TensorToFloat(src));
    e->vocab = src.shape[0];
    e->dim = src.shape[1];
    const auto b = ToBf16(f);
    SPAR_RETURN_IF_ERROR(e->table.Upload(b.data(), b.size() * 2));
    return std::unique_ptr<Weight>(std::move(e));
  }

  absl::StatusOr<std::unique_ptr<Weight>> CreateAbsorb(const AbsorbSource& src) override {
    SPAR_ASSIGN_OR_RETURN(std::vector<float> kv_b, MatrixToFloat(src.kv_b));
    const int64_t per_head = src.nope_dim + src.v_dim;
    const int64_t begin = static_cast<int64_t>(src.head_begin) * per_head * src.kv_lora_rank;
    const int64_t count = static_cast<int64_t>(src.heads) * per_head * src.kv_lora_rank;
    if (src.kv_lora_rank != 512 || begin + count > static_cast<int64_t>(kv_b.size())) {
      return absl::InvalidArgumentError(absl::StrCat("kv_b \"", src.kv_b.weight.name, "\" does not match ", src.heads,
                                                     " heads x ", per_head, " x 512"));
    }
    auto a = std::make_unique<CudaAbsorb>();
    const auto b = ToBf16(std::vector<float>(kv_b.begin() + begin, kv_b.begin() + begin + count));
    SPAR_RETURN_IF_ERROR(a->kv_b.Upload(b.data(), b.size() * 2));
    a->w.kv_b = a->kv_b.as<__nv_bfloat16>();
    a->w.heads = src.heads;
    a->w.nope_dim = src.nope_dim;
    a->w.v_dim = src.v_dim;
    return std::unique_ptr<Weight>(std::move(a));
  }

  absl::StatusOr<std::unique_ptr<Weight>> CreateMlp(const MlpSource& src) override {
    auto m = std::make_unique<CudaMlp>();
    SPAR_RETURN_IF_ERROR(UploadMlp(src, m.get()));
    return std::unique_ptr<Weight>(std::move(m));
  }

  absl::StatusOr<std::unique_ptr<Weight>> CreateMoe(const MoeSource& src) override {
    auto moe = std::make_unique<CudaMoe>();
    MatrixSource router;
    router.weight = src.router;
    SPAR_RETURN_IF_ERROR(UploadMatrix(router, &moe->router));
    SPAR_ASSIGN_OR_RETURN(std::vector<float> bias, TensorToFloat(src.correction_bias));
    SPAR_RETURN_IF_ERROR(moe->bias.Upload(bias.data(), bias.size() * 4));
    if (src.experts.empty()) return absl::InvalidArgumentError("MoE layer without local experts");
    std::vector<const MatrixSource*> gate, up, down;
    for (const auto& e : src.experts) {
      gate.push_back(&e.gate);
      up.push_back(&e.up);
      down.push_back(&e.down);
    }
    SPAR_RETURN_IF_ERROR(PackExperts(gate, &moe->gate));
    SPAR_RETURN_IF_ERROR(PackExperts(up, &moe->up));
    SPAR_RETURN_IF_ERROR(PackExperts(down, &moe->down));
    moe->num_local = static_cast<int>(src.experts.size());
    moe->expert_begin = src.expert_begin;
    moe->inter = src.experts[0].gate.rows();
    moe->hidden = src.experts[0].gate.cols();
    if (src.shared) {
      moe->shared = std::make_unique<CudaMlp>();
      SPAR_RETURN_IF_ERROR(UploadMlp(*src.shared, moe->shared.get()));
    }
    moe->route.num_experts = src.num_experts;
    moe->route.top_k = src.top_k;
    moe->route.n_group = src.n_group;
    moe->route.topk_group = src.topk_group;
    moe->route.renormalize = src.renormalize;
    moe->route.routed_scaling = src.routed_scaling;
    return std::unique_ptr<Weight>(std::move(moe));
  }

  absl::Status SetRope(const ref::RopeParams& params, int64_t max_positions) override {
    rope_ = params;
    const std::vector<float> inv = ref::RopeInvFreq(params);
    SPAR_RETURN_IF_ERROR(inv_freq_.Upload(inv.data(), inv.size() * 4));
    // Host-built angle tables for the indexer kernels, one row per position.
    // The served context (the model's, or --max-model-len), unless the
    // backend options cap it.
    rope_rows_ = options_.max_positions > 0 ? options_.max_positions
                                            : (max_positions > 0 ? max_positions : kDefaultRopeRows);
    std::vector<float> cs(static_cast<size_t>(rope_rows_) * inv.size()), sn(cs.size());
    for (int64_t p = 0; p < rope_rows_; ++p) {
      ref::RopeCosSin(inv, p, static_cast<float>(params.attention_factor), cs.data() + p * inv.size(),
                      sn.data() + p * inv.size());
    }
    SPAR_RETURN_IF_ERROR(rope_cos_.Upload(cs.data(), cs.size() * 4));
    SPAR_RETURN_IF_ERROR(rope_sin_.Upload(sn.data(), sn.size() * 4));
    return absl::OkStatus();
  }

  // ---- caches ----

  absl::StatusOr<int64_t> AllocateCaches(const CacheSpec& spec) override {
    spec_ = spec;
    // The cpu reference formats (F32) have no GPU kernels: use the cuda defaults.
    if (spec_.latent_format == ref::LatentFormat::kF32) spec_.latent_format = options_.latent_format;
    if (spec_.indexer_format == ref::IndexerFormat::kF32) spec_.indexer_format = options_.indexer_format;
    if (!MlaCacheWriteSupported(spec_.latent_format)) return absl::InvalidArgumentError("latent cache format unsupported");
    latent_.clear();
    indexer_.clear();
    const size_t block_bytes_per_layer = CacheBlockBytesPerLayer(spec_.latent_format, spec_.indexer_format);
    {
      SPAR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
      size_t free_bytes = 0, total = 0;
      SPAR_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total));
      memory_.weights_bytes = std::max<int64_t>(0, static_cast<int64_t>(total - free_bytes) - used_at_init_);
    }
    if (spec.memory_utilization > 0) {
      SPAR_ASSIGN_OR_RETURN(spec_.num_blocks, BlocksForBudget(spec, block_bytes_per_layer * spec.num_layers));
    }
    memory_.cache_bytes = static_cast<int64_t>(block_bytes_per_layer * spec.num_layers * spec_.num_blocks);
    if (spec_.num_blocks < 1) return absl::InvalidArgumentError("cache needs at least one block");
    latent_.resize(spec.num_layers);
    indexer_.resize(spec.num_layers);
    const size_t latent_bytes = static_cast<size_t>(spec_.num_blocks) * 64 * ref::LatentRowBytes(spec_.latent_format);
    const size_t indexer_bytes = static_cast<size_t>(spec_.num_blocks) * ref::IndexerPageBytes(spec_.indexer_format);
    for (int l = 0; l < spec.num_layers; ++l) {
      SPAR_RETURN_IF_ERROR(latent_[l].Allocate(latent_bytes));
      SPAR_RETURN_IF_ERROR(indexer_[l].Allocate(indexer_bytes));
      SPAR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(latent_[l].as<void>(), 0, latent_bytes, stream_));
      SPAR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(indexer_[l].as<void>(), 0, indexer_bytes, stream_));
    }
    SPAR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return spec_.num_blocks;
  }

  // Blocks that fit in utilization × device memory next to what is in use.
  absl::StatusOr<int64_t> BlocksForBudget(const CacheSpec& spec, size_t bytes_per_block) {
    if (spec.memory_utilization > 1) {
      return absl::InvalidArgumentError(absl::StrCat("gpu memory utilization ", spec.memory_utilization,
                                                     " is above 1"));
    }
    SPAR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    size_t free_bytes = 0, total = 0;
    SPAR_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total));
    const double used = static_cast<double>(total - free_bytes);
    const double budget = spec.memory_utilization * static_cast<double>(total) - used -
                          static_cast<double>(spec.activation_reserve_bytes);
    const int64_t blocks = budget > 0 ? static_cast<int64_t>(budget / static_cast<double>(bytes_per_block)) : 0;
    if (blocks < 1) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "no room for the KV cache: ", spec.memory_utilization, " x ", total >> 20, " MiB allowed, ", used / (1 << 20),
          " MiB in use (weights, other processes), ", spec.activation_reserve_bytes >> 20,
          " MiB kept for activations; raise --gpu-memory-utilization or hold fewer layers per GPU"));
    }
    return blocks;
  }

  // ---- step metadata ----

  absl::Status BeginStep(const StepPlan& plan) override {
    SPAR_RETURN_IF_ERROR(ScanPlan(plan));
    return UploadStepMetadata(plan, table_stride_, &meta_, /*may_grow=*/true);
  }

  absl::StatusOr<Tensor> RunStep(const StepPlan& plan, const Tensor* input, const StepOps& ops,
                                 const StepOptions& step) override {
    SPAR_RETURN_IF_ERROR(CheckNotAborted());
    std::optional<DecodeGraphKey> key;
    if (options_.cuda_graphs && step.replayable && (input == nullptr || input->dtype() == DType::kBF16)) {
      key = DecodeGraphKeyFor(plan, input != nullptr, step.indexer_topk, kMaxGraphTokens);
    }
    // Under TP, sample the all-reduce times with an eager step now and then.
    const bool sample_collectives = key && options_.tp.size > 1 && options_.collective_sample_period > 0 &&
                                    ++steps_since_collective_sample_ >= options_.collective_sample_period;
    if (sample_collectives) steps_since_collective_sample_ = 0;
    auto run_eagerly = [&]() -> absl::StatusOr<Tensor> {
      graph_stats_.eager_steps += 1;
      SPAR_RETURN_IF_ERROR(BeginStep(plan));
      return ops(input);
    };
    if (!key || uncapturable_.count(*key) || sample_collectives) return run_eagerly();
    SPAR_RETURN_IF_ERROR(ScanPlan(plan));
    DecodeGraph* g = nullptr;
    if (auto it = graphs_.find(*key); it != graphs_.end()) {
      g = it->second.get();
      SPAR_RETURN_IF_ERROR(UploadStepMetadata(plan, key->table_stride, &g->meta, /*may_grow=*/false));
      if (input != nullptr) SPAR_RETURN_IF_ERROR(CopyRowsTo(*input, g->input.as<void>(), input->cols()));
    } else {
      SPAR_ASSIGN_OR_RETURN(g, Capture(*key, plan, input, ops));
      if (g == nullptr) return run_eagerly();  // not capturable: this shape runs eagerly from now on
    }
    g->last_used = ++graph_clock_;
    SPAR_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(g->exec, stream_));
    graph_stats_.replays += 1;
    // Hand out a copy: the graph's output buffer is reallocated by its next
    // launch, while a caller may keep the result.
    return Clone(g->output);
  }

  void set_step_replay(bool enabled) override { options_.cuda_graphs = enabled; }

  StepGraphStats graph_stats() const override {
    StepGraphStats s = graph_stats_;
    s.graphs = static_cast<int64_t>(graphs_.size());
    return s;
  }

  // Copies x's rows (any dtype) on the stream to dst, whose rows are
  // ld_dst elements apart.
  absl::Status CopyRowsTo(const Tensor& x, void* dst, int64_t ld_dst) {
    const size_t elem = DTypeSize(x.dtype());
    SPAR_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(dst, ld_dst * elem, x.data(), x.ld() * elem, x.cols() * elem,
                                                x.rows(), cudaMemcpyDeviceToDevice, stream_));
    return absl::OkStatus();
  }
  // A new tensor holding a copy of x.
  absl::StatusOr<Tensor> Clone(const Tensor& x) {
    SPAR_ASSIGN_OR_RETURN(Tensor out, NewTensor(x.rows(), x.cols(), x.dtype()));
    SPAR_RETURN_IF_ERROR(CopyRowsTo(x, out.data(), out.ld()));
    return out;
  }
  // A new [1, count] tensor of `dtype` holding count elements uploaded from
  // pageable host memory: stream-ordered (the host buffer is staged before
  // cudaMemcpyAsync returns, so it may die at once) and capturable.
  absl::StatusOr<Tensor> Upload(const void* host, int64_t count, DType dtype) {
    SPAR_ASSIGN_OR_RETURN(Tensor t, NewTensor(1, count, dtype));
    SPAR_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(t.data(), host, static_cast<size_t>(count) * DTypeSize(dtype), cudaMemcpyHostToDevice, stream_));
    return t;
  }

  // Records `ops` for this step shape into a new graph (ScanPlan done).
  // Returns null when the ops cannot be captured (some op synchronises or
  // allocates outside the stream): the caller runs them eagerly.
  absl::StatusOr<DecodeGraph*> Capture(const DecodeGraphKey& key, const StepPlan& plan, const Tensor* input,
                                       const StepOps& ops) {
    if (static_cast<int>(graphs_.size()) >= std::max(1, options_.max_cuda_graphs)) {
      auto lru = graphs_.begin();
      for (auto it = graphs_.begin(); it != graphs_.end(); ++it) {
        if (it->second->last_used < lru->second->last_used) lru = it;
      }
      SPAR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));  // no launch of it in flight
      graphs_.erase(lru);
    }
    auto g = std::make_unique<DecodeGraph>();
    SPAR_RETURN_IF_ERROR(UploadStepMetadata(plan, key.table_stride, &g->meta, /*may_grow=*/true));
    // Grids sized for the whole bucket: the kernels stop at each row's length.
    if (!key.select_all) max_ctx_ = std::max<int64_t>(max_ctx_, key.max_context());
    Tensor in;
    if (input != nullptr) {
      SPAR_RETURN_IF_ERROR(g->input.Allocate(static_cast<size_t>(input->rows() * input->cols()) * 2));
      SPAR_RETURN_IF_ERROR(CopyRowsTo(*input, g->input.as<void>(), input->cols()));
      in = Tensor(DType::kBF16, input->rows(), input->cols(), nullptr, g->input.as<void>(), input->cols());
    }
    cudaGraph_t graph = nullptr;
    SPAR_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    capturing_ = true;
    absl::StatusOr<Tensor> out = ops(input != nullptr ? &in : nullptr);
    capturing_ = false;
    const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
    cudaError_t inst = cudaErrorUnknown;
    if (out.ok() && end == cudaSuccess) {
      inst = cudaGraphInstantiateWithFlags(&g->exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch);
    }
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (!out.ok() || end != cudaSuccess || inst != cudaSuccess) {
      const std::string why = !out.ok() ? std::string(out.status().message())
                                        : cudaGetErrorString(end != cudaSuccess ? end : inst);
      g->exec = nullptr;
      out = Tensor();  // a failed capture's tensors were never allocated
      cudaGetLastError();  // capture errors are not sticky; clear the last one
      uncapturable_.insert(key);
      graph_stats_.capture_failures += 1;
      std::fprintf(stderr, "cuda backend: decode step (%s) not captured as a graph, runs eagerly: %s\n",
                   key.DebugString().c_str(), why.c_str());
      return static_cast<DecodeGraph*>(nullptr);
    }
    g->output = *std::move(out);
    graph_stats_.captures += 1;
    DecodeGraph* raw = g.get();
    graphs_[key] = std::move(g);
    return raw;
  }

  // Validates the plan against the caches and RoPE tables and sets the
  // step's host-side numbers.
  absl::Status ScanPlan(const StepPlan& plan) {
    plan_ = &plan;
    tokens_ = plan.num_tokens();
    num_seqs_ = static_cast<int64_t>(plan.seqs.size());
    table_stride_ = 1;
    all_single_ = true;
    max_ctx_ = 0;
    for (const auto& q : plan.seqs) {
      table_stride_ = std::max<int64_t>(table_stride_, static_cast<int64_t>(q.block_table.size()));
      for (int32_t b : q.block_table) {
        if (b < 0 || b >= spec_.num_blocks) return absl::InvalidArgumentError(absl::StrCat("block ", b, " out of range"));
      }
      all_single_ = all_single_ && q.tokens.size() == 1;
    }
    for (int32_t p : plan.positions) {
      if (p >= rope_rows_) {
        return absl::InvalidArgumentError(absl::StrCat("position ", p, " beyond the RoPE tables (", rope_rows_, ")"));
      }
      max_ctx_ = std::max<int64_t>(max_ctx_, p + 1);
    }
    return absl::OkStatus();
  }

  // Writes the step's per-token metadata into `dst` and points the ops at
  // it: ids, positions, slots, token_seq, kv_len (= position + 1), logit
  // rows, block tables [seqs, stride]. One pageable copy: the driver stages
  // it at once, so no host synchronisation is needed before the buffer is
  // reused; the stream orders it after the previous step's kernels.
  absl::Status UploadStepMetadata(const StepPlan& plan, int64_t stride, DeviceBuffer* dst, bool may_grow) {
    host_meta_.clear();
    auto put = [&](const std::vector<int32_t>& v) {
      const size_t at = host_meta_.size();
      host_meta_.insert(host_meta_.end(), v.begin(), v.end());
      while (host_meta_.size() % 4) host_meta_.push_back(0);  // 16-byte aligned sections
      return at;
    };
    std::vector<int32_t> kv_len(tokens_);
    for (int64_t t = 0; t < tokens_; ++t) kv_len[t] = plan.positions[t] + 1;
    std::vector<int32_t> tables(static_cast<size_t>(num_seqs_ * stride), 0);
    for (int64_t s = 0; s < num_seqs_; ++s) {
      std::copy(plan.seqs[s].block_table.begin(), plan.seqs[s].block_table.end(), tables.begin() + s * stride);
    }
    const size_t o_ids = put(plan.token_ids), o_pos = put(plan.positions), o_slots = put(plan.slots),
                 o_seq = put(plan.token_seq), o_kv = put(kv_len), o_logit = put(plan.logit_rows), o_tab = put(tables);
    const size_t bytes = host_meta_.size() * 4;
    if (bytes > dst->bytes()) {
      if (!may_grow) {
        return absl::InternalError(absl::StrCat("step metadata of ", bytes, " bytes does not fit its graph's ",
                                                dst->bytes(), " bytes"));
      }
      SPAR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));  // the old buffer may still be read
      SPAR_RETURN_IF_ERROR(dst->Allocate(std::max<size_t>(bytes * 2, 1 << 16)));
    }
    SPAR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst->as<void>(), host_meta_.data(), bytes, cudaMemcpyHostToDevice, stream_));
    int32_t* base = dst->as<int32_t>();
    d_ids_ = base + o_ids;
    d_pos_ = base + o_pos;
    d_slots_ = base + o_slots;
    d_seq_ = base + o_seq;
    d_kv_len_ = base + o_kv;
    d_logit_rows_ = base + o_logit;
    d_tables_ = base + o_tab;
    table_stride_ = stride;
    return absl::OkStatus();
  }

  // ---- activations ----

  absl::StatusOr<Tensor> NewTensor(int64_t rows, int64_t cols, DType dtype = DType::kBF16) {
    const size_t bytes = std::max<size_t>(static_cast<size_t>(rows * cols) * DTypeSize(dtype), 16);
    void* p = nullptr;
    SPAR_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&p, bytes, stream_));
    cudaStream_t s = stream_;
    std::shared_ptr<void> storage(p, [s](void* q) { cudaFreeAsync(q, s); });
    return Tensor(dtype, rows, cols, std::move(storage), p, cols);
  }

  absl::StatusOr<Tensor> Embed(const Weight& table) override {
    const auto& e = As<CudaEmbedding>(table);
    SPAR_RETURN_IF_ERROR(MarkOp("embed"));
    SPAR_ASSIGN_OR_RETURN(Tensor x, NewTensor(tokens_, e.dim));
    EmbeddingParams p;
    p.ids = d_ids_;
    p.tokens = tokens_;
    p.table = e.table.as<__nv_bfloat16>();
    p.vocab = e.vocab;
    p.dim = static_cast<int>(e.dim);
    p.out = Bf16Mut(x);
    p.out_stride = x.ld();
    SPAR_RETURN_IF_ERROR(LaunchEmbedding(p, stream_));
    return x;
  }

  absl::StatusOr<Tensor> Gemm(const Tensor& x, const std::vector<const GemmWeight*>& segments, int64_t n_out,
                              bool fp32_out, const GemmWeight* up = nullptr) {
    // The label is built only while profiling: Gemm is on every step's path.
    if (op_profile_) {
      SPAR_RETURN_IF_ERROR(MarkOp(absl::StrCat("gemm ", up != nullptr ? "gate_up " : "", n_out, "x", x.cols())));
    }
    SPAR_ASSIGN_OR_RETURN(Tensor y, NewTensor(x.rows(), n_out, fp32_out ? DType::kF32 : DType::kBF16));
    W8A16GemmParams p;
    p.m = x.rows();
    p.k = x.cols();
    p.x = Bf16(x);
    p.ldx = x.ld();
    p.num_segments = static_cast<int>(segments.size());
    for (size_t i = 0; i < segments.size(); ++i) p.segments[i] = *segments[i];
    if (up != nullptr) {
      p.epilogue = GemmEpilogue::kSiluMul;
      p.up = *up;
    }
    p.y = y.data();
    p.ldy = y.ld();
    p.y_fp32 = fp32_out;
    p.workspace = gemm_workspace_.as<void>();
    p.workspace_bytes = gemm_workspace_.bytes();
    SPAR_RETURN_IF_ERROR(LaunchW8A16Gemm(p, stream_));
    return y;
  }

  absl::StatusOr<Tensor> Linear(const Tensor& x, const Weight& w) override {
    const auto& lin = As<CudaLinear>(w);
    if (x.cols() != lin.k) return absl::InvalidArgumentError(absl::StrCat("linear: input has ", x.cols(), " columns, weight ", lin.k));
    std::vector<const GemmWeight*> segs;
    for (const auto& part : lin.parts) segs.push_back(&part->gemm);
    return Gemm(x, segs, lin.n_total, lin.fp32_out);
  }

  absl::StatusOr<Tensor> Norm(const Tensor& x, Tensor* residual, const CudaVector& w, float eps) {
    SPAR_RETURN_IF_ERROR(MarkOp(residual != nullptr ? "add_rms_norm" : "rms_norm"));
    SPAR_ASSIGN_OR_RETURN(Tensor out, NewTensor(x.rows(), x.cols()));
    RmsNormParams p;
    p.x = Bf16(x);
    p.x_stride = x.ld();
    if (residual != nullptr) {
      p.residual = Bf16Mut(*residual);
      p.residual_stride = residual->ld();
    }
    p.weight = w.bf16.as<__nv_bfloat16>();
    p.out = Bf16Mut(out);
    p.out_stride = out.ld();
    p.rows = x.rows();
    p.dim = static_cast<int>(x.cols());
    p.eps = eps;
    SPAR_RETURN_IF_ERROR(LaunchRmsNorm(p, stream_));
    return out;
  }

  absl::StatusOr<Tensor> RmsNorm(const Tensor& x, const Weight& w, float eps) override {
    return Norm(x, nullptr, As<CudaVector>(w), eps);
  }

  absl::StatusOr<Tensor> AddRmsNorm(Tensor* residual, const Tensor& x, const Weight& w, float eps) override {
    if (residual->empty()) {
      SPAR_RETURN_IF_ERROR(MarkOp("residual_copy"));
      SPAR_ASSIGN_OR_RETURN(*residual, Clone(x));
      return Norm(*residual, nullptr, As<CudaVector>(w), eps);
    }
    return Norm(x, residual, As<CudaVector>(w), eps);
  }

  absl::Status AddInPlace(Tensor* acc, const Tensor& x) override {
    if (acc->rows() != x.rows() || acc->cols() != x.cols()) return absl::InvalidArgumentError("add: shape mismatch");
    SPAR_RETURN_IF_ERROR(MarkOp("add"));
    return glue::AddBf16(acc->as<uint16_t>(), acc->ld(), x.as<uint16_t>(), x.ld(), x.rows(), x.cols(), stream_);
  }

  absl::StatusOr<Tensor> Mlp(const Tensor& x, const Weight& w) override {
    const auto& m = As<CudaMlp>(w);
    SPAR_ASSIGN_OR_RETURN(Tensor h, Gemm(x, {&m.gate.gemm}, m.inter, false, &m.up.gemm));
    // Under TP the output is a partial sum: keep it fp32 for the all-reduce.
    return Gemm(h, {&m.down.gemm}, m.down.gemm.n, /*fp32_out=*/options_.tp.size > 1);
  }

  absl::StatusOr<Tensor> Moe(const Tensor& x, const Weight& w) override {
    const auto& moe = As<CudaMoe>(w);
    const int64_t t_count = x.rows();
    const int k = moe.route.top_k;
    const int64_t rows = t_count * k;
    SPAR_ASSIGN_OR_RETURN(Tensor logits, Gemm(x, {&moe.router.gemm}, moe.route.num_experts, /*fp32_out=*/true));
    SPAR_RETURN_IF_ERROR(MarkOp("moe.route_permute"));
    SPAR_ASSIGN_OR_RETURN(Tensor ids, NewTensor(t_count, k, DType::kI32));
    SPAR_ASSIGN_OR_RETURN(Tensor wts, NewTensor(t_count, k, DType::kF32));
    MoeRouteParams route = moe.route;
    route.tokens = t_count;
    route.logits = logits.as<float>();
    route.ld_logits = logits.ld();
    route.bias = moe.bias.as<float>();
    route.expert_ids = ids.as<int32_t>();
    route.expert_weights = wts.as<float>();
    SPAR_RETURN_IF_ERROR(LaunchMoeRoute(route, stream_));
    SPAR_ASSIGN_OR_RETURN(Tensor offsets, NewTensor(1, moe.num_local + 1, DType::kI32));
    SPAR_ASSIGN_OR_RETURN(Tensor sorted, NewTensor(1, rows, DType::kI32));
    SPAR_ASSIGN_OR_RETURN(Tensor slot, NewTensor(t_count, k, DType::kI32));
    MoePermuteParams perm;
    perm.tokens = t_count;
    perm.top_k = k;
    perm.expert_ids = ids.as<int32_t>();
    perm.expert_begin = moe.expert_begin;
    perm.expert_end = moe.expert_begin + moe.num_local;
    perm.expert_offsets = offsets.as<int32_t>();
    perm.sorted_token = sorted.as<int32_t>();
    perm.slot = slot.as<int32_t>();
    SPAR_RETURN_IF_ERROR(LaunchMoePermute(perm, stream_));
    const size_t ws_bytes = MoeGroupedGemmWorkspaceBytes(rows, moe.num_local);
    SPAR_ASSIGN_OR_RETURN(Tensor ws, NewTensor(1, static_cast<int64_t>(ws_bytes) + 16, DType::kU8));
    auto grouped = [&](const Tensor& in, const int32_t* row_index, const PackedExperts& weight,
                       const PackedExperts* up, int64_t n_out) -> absl::StatusOr<Tensor> {
      SPAR_ASSIGN_OR_RETURN(Tensor out, NewTensor(rows, n_out));
      MoeGroupedGemmParams g;
      g.num_experts = moe.num_local;
      g.expert_offsets = offsets.as<int32_t>();
      g.max_rows = rows;
      g.expected_rows_per_expert = std::max<int64_t>(1, rows / std::max(1, moe.route.num_experts));
      g.k = in.cols();
      g.x = Bf16(in);
      g.ldx = in.ld();
      g.x_row_index = row_index;
      g.weight = weight.first;
      g.expert_weight_stride = weight.weight_stride;
      g.expert_scale_stride = weight.scale_stride;
      if (up != nullptr) {
        g.epilogue = GemmEpilogue::kSiluMul;
        g.up = up->first;
      }
      g.y = out.data();
      g.ldy = out.ld();
      g.workspace = ws.data();
      g.workspace_bytes = ws_bytes;
      SPAR_RETURN_IF_ERROR(LaunchMoeGroupedGemm(g, stream_));
      return out;
    };
    SPAR_RETURN_IF_ERROR(MarkOp("moe.experts_gate_up"));
    SPAR_ASSIGN_OR_RETURN(Tensor h, grouped(x, sorted.as<int32_t>(), moe.gate, &moe.up, moe.inter));
    SPAR_RETURN_IF_ERROR(MarkOp("moe.experts_down"));
    SPAR_ASSIGN_OR_RETURN(Tensor yd, grouped(h, nullptr, moe.down, nullptr, moe.hidden));
    Tensor shared;
    if (moe.shared) {
      const auto& sh = *moe.shared;
      SPAR_ASSIGN_OR_RETURN(Tensor hs, Gemm(x, {&sh.gate.gemm}, sh.inter, false, &sh.up.gemm));
      SPAR_ASSIGN_OR_RETURN(shared, Gemm(hs, {&sh.down.gemm}, sh.down.gemm.n, false));
    }
    const bool partial = options_.tp.size > 1;  // fp32 partial sum for the all-reduce
    SPAR_RETURN_IF_ERROR(MarkOp("moe.combine"));
    SPAR_ASSIGN_OR_RETURN(Tensor out, NewTensor(t_count, moe.hidden, partial ? DType::kF32 : DType::kBF16));
    MoeCombineParams c;
    c.tokens = t_count;
    c.top_k = k;
    c.hidden = moe.hidden;
    c.expert_out = Bf16(yd);
    c.ld_expert = yd.ld();
    c.slot = slot.as<int32_t>();
    c.weights = wts.as<float>();
    if (!shared.empty()) {
      c.shared = Bf16(shared);
      c.ld_shared = shared.ld();
    }
    if (partial) {
      c.out_f32 = out.as<float>();
    } else {
      c.out = Bf16Mut(out);
    }
    c.ld_out = out.ld();
    SPAR_RETURN_IF_ERROR(LaunchMoeCombine(c, stream_));
    return out;
  }

  absl::StatusOr<Tensor> GatherRows(const Tensor& x, const std::vector<int32_t>& rows) override {
    SPAR_RETURN_IF_ERROR(MarkOp("gather_rows"));
    SPAR_ASSIGN_OR_RETURN(Tensor y, NewTensor(static_cast<int64_t>(rows.size()), x.cols(), x.dtype()));
    const int32_t* d_rows = d_logit_rows_;
    Tensor tmp;  // stream-ordered: no host synchronisation for its lifetime
    if (plan_ == nullptr || rows != plan_->logit_rows) {
      SPAR_ASSIGN_OR_RETURN(tmp, Upload(rows.data(), static_cast<int64_t>(rows.size()), DType::kI32));
      d_rows = tmp.as<int32_t>();
    }
    SPAR_RETURN_IF_ERROR(glue::GatherRows(x.data(), x.ld(), d_rows, static_cast<int64_t>(rows.size()), x.cols(),
                                          static_cast<int>(DTypeSize(x.dtype())), y.data(), y.ld(), stream_));
    return y;
  }

  // ---- attention ----

  absl::Status WriteLatentCache(int layer, const Tensor& kv_a, const Weight& kv_a_norm, float eps) override {
    SPAR_RETURN_IF_ERROR(CheckLayer(layer));
    SPAR_RETURN_IF_ERROR(MarkOp("latent_cache_write"));
    MlaCacheWriteParams p;
    p.kv = Bf16(kv_a);
    p.tokens = kv_a.rows();
    p.kv_stride = kv_a.ld();
    p.norm_weight = As<CudaVector>(kv_a_norm).bf16.as<__nv_bfloat16>();
    p.eps = eps;
    p.positions = d_pos_;
    p.inv_freq = inv_freq_.as<float>();
    p.attention_factor = static_cast<float>(rope_.attention_factor);
    p.interleaved = true;
    p.slot_mapping = d_slots_;
    p.format = spec_.latent_format;
    p.cache = latent_[layer].as<uint8_t>();
    p.num_slots = spec_.num_blocks * 64;
    return LaunchMlaCacheWrite(p, stream_);
  }

  absl::StatusOr<Tensor> AbsorbQuery(const Tensor& q, const Weight& w) override {
    const auto& a = As<CudaAbsorb>(w);
    const int heads = a.w.heads;
    const int q_head_dim = static_cast<int>(q.cols() / heads);
    if (!q.contiguous() || q_head_dim != a.w.nope_dim + 64) return absl::InvalidArgumentError("absorb: bad query layout");
    SPAR_RETURN_IF_ERROR(MarkOp("absorb_query"));
    SPAR_ASSIGN_OR_RETURN(Tensor out, NewTensor(q.rows(), static_cast<int64_t>(heads) * 576));
    SPAR_RETURN_IF_ERROR(LaunchMlaQAbsorb(a.w, Bf16(q), q.rows(), q_head_dim, Bf16Mut(out),
                                          static_cast<int64_t>(heads) * 576, 576, stream_));
    RopeApplyParams r;
    r.in = Bf16(q);
    r.in_stride = q_head_dim;
    r.in_offset = a.w.nope_dim;
    r.out = Bf16Mut(out);
    r.out_stride = 576;
    r.out_offset = 512;
    r.rows = q.rows() * heads;
    r.rows_per_position = heads;
    r.positions = d_pos_;
    r.rotary_dim = 64;
    r.inv_freq = inv_freq_.as<float>();
    r.attention_factor = static_cast<float>(rope_.attention_factor);
    r.interleaved = true;
    SPAR_RETURN_IF_ERROR(LaunchRopeApply(r, stream_));
    return out;
  }

  IndexerRope IndexerRopeTables(const IndexerSpec& spec) const {
    IndexerRope r;
    r.cos = rope_cos_.as<float>();
    r.sin = rope_sin_.as<float>();
    r.rows = rope_rows_;
    r.pairs = spec.rope_pairs;
    return r;
  }

  absl::Status WriteIndexerCache(int layer, const Tensor& k, const Weight& norm_w, const Weight& norm_b, float eps,
                                 const IndexerSpec& spec) override {
    SPAR_RETURN_IF_ERROR(CheckLayer(layer));
    SPAR_RETURN_IF_ERROR(MarkOp("indexer.key_write"));
    IndexerKeyWriteParams p;
    p.tokens = k.rows();
    p.x = k.as<uint16_t>();
    p.x_stride = k.ld();
    p.norm_weight = As<CudaVector>(norm_w).f32.as<float>();
    p.norm_bias = As<CudaVector>(norm_b).f32.as<float>();
    p.eps = eps;
    p.positions = d_pos_;
    p.rope = IndexerRopeTables(spec);
    p.slots = d_slots_;
    p.format = spec_.indexer_format;
    p.cache = indexer_[layer].as<uint8_t>();
    return LaunchIndexerKeyWrite(p, stream_);
  }

  absl::StatusOr<Tensor> IndexerTopK(int layer, const Tensor& q, const Tensor& w, const IndexerSpec& spec) override {
    SPAR_RETURN_IF_ERROR(CheckLayer(layer));
    SPAR_RETURN_IF_ERROR(MarkOp("indexer.query_prep"));
    SPAR_ASSIGN_OR_RETURN(Tensor out, NewTensor(tokens_, spec.topk, DType::kI32));
    if (max_ctx_ <= spec.topk) {
      // Every token sees at most topk keys: all of them are selected, in
      // ascending order (what the top-k would return), without scoring.
      SPAR_RETURN_IF_ERROR(glue::DenseSlots(out.as<int32_t>(), tokens_, spec.topk, d_kv_len_, d_seq_, d_tables_,
                                            table_stride_, stream_));
      return out;
    }
    // q in place: RoPE on each head's first 64 dims; w scaled into fp32.
    SPAR_ASSIGN_OR_RETURN(Tensor wf, NewTensor(tokens_, spec.heads, DType::kF32));
    IndexerQueryPrepParams qp;
    qp.tokens = tokens_;
    qp.heads = spec.heads;
    qp.q = q.as<uint16_t>();
    qp.q_stride = q.ld();
    qp.q_out = q.as<uint16_t>();
    qp.q_out_stride = q.ld();
    qp.positions = d_pos_;
    qp.rope = IndexerRopeTables(spec);
    qp.w_in_bf16 = w.as<uint16_t>();
    qp.w_in_stride = w.ld();
    qp.weight_scale = spec.weight_scale;
    qp.w_out = wf.as<float>();
    SPAR_RETURN_IF_ERROR(LaunchIndexerQueryPrep(qp, stream_));
    // Logits [tokens, stride]; rows are either per-sequence paged (decode
    // steps) or over each sequence's gathered keys (prefill and mixed steps).
    // Gathered rows: row t starts at its sequence's first key (ks, on the device).
    SPAR_RETURN_IF_ERROR(MarkOp("indexer.logits"));
    const int32_t* d_row_start = nullptr;
    int64_t stride = (max_ctx_ + 3) / 4 * 4;
    Tensor logits, keys, kscale, starts;
    if (all_single_) {
      SPAR_ASSIGN_OR_RETURN(logits, NewTensor(tokens_, stride, DType::kF32));
      IndexerLogitsPagedParams lp;
      lp.num_seqs = static_cast<int>(tokens_);
      lp.next_n = 1;
      lp.heads = spec.heads;
      lp.q = q.as<uint16_t>();
      lp.q_stride = q.ld();
      lp.w = wf.as<float>();
      lp.w_stride = spec.heads;
      lp.context_lens = d_kv_len_;
      lp.max_context_len = static_cast<int>(max_ctx_);
      lp.block_table = d_tables_;
      lp.block_table_stride = table_stride_;
      lp.format = spec_.indexer_format;
      lp.cache = indexer_[layer].as<uint8_t>();
      lp.logits = logits.as<float>();
      lp.logits_stride = stride;
      SPAR_RETURN_IF_ERROR(LaunchIndexerLogitsPaged(lp, stream_));
    } else {
      // Gather each sequence's keys [0, its last position] into one array.
      std::vector<int32_t> seq_len(num_seqs_), seq_off(num_seqs_), ks(tokens_), ke(tokens_);
      int64_t total = 0;
      int max_len = 0;
      for (int64_t s = 0; s < num_seqs_; ++s) {
        const auto& q_s = plan_->seqs[s];
        seq_len[s] = q_s.start_pos + static_cast<int32_t>(q_s.tokens.size());
        seq_off[s] = static_cast<int32_t>(total);
        total += seq_len[s];
        max_len = std::max(max_len, seq_len[s]);
      }
      for (int64_t t = 0; t < tokens_; ++t) {
        ks[t] = seq_off[plan_->token_seq[t]];
        ke[t] = ks[t] + plan_->positions[t] + 1;
      }
      stride = (total + 3) / 4 * 4;
      std::vector<int32_t> meta;
      for (auto* v : {&seq_len, &seq_off, &ks, &ke}) meta.insert(meta.end(), v->begin(), v->end());
      // Stream-ordered, so it may die with this frame without a host sync.
      SPAR_ASSIGN_OR_RETURN(starts, Upload(meta.data(), static_cast<int64_t>(meta.size()), DType::kI32));
      const int32_t* d_len = starts.as<int32_t>();
      const int32_t* d_off = d_len + num_seqs_;
      const int32_t* d_ks = d_off + num_seqs_;
      const int32_t* d_ke = d_ks + tokens_;
      d_row_start = d_ks;
      const bool fp8 = spec_.indexer_format == ref::IndexerFormat::kFp8;
      SPAR_ASSIGN_OR_RETURN(keys, NewTensor(total, fp8 ? 128 : 256, DType::kU8));
      SPAR_ASSIGN_OR_RETURN(kscale, NewTensor(1, total, DType::kF32));
      IndexerGatherParams gp;
      gp.num_seqs = static_cast<int>(num_seqs_);
      gp.seq_lens = d_len;
      gp.out_offsets = d_off;
      gp.max_seq_len = max_len;
      gp.block_table = d_tables_;
      gp.block_table_stride = table_stride_;
      gp.format = spec_.indexer_format;
      gp.cache = indexer_[layer].as<uint8_t>();
      gp.keys = keys.data();
      gp.k_scale = fp8 ? kscale.as<float>() : nullptr;
      SPAR_RETURN_IF_ERROR(LaunchIndexerGather(gp, stream_));
      SPAR_ASSIGN_OR_RETURN(logits, NewTensor(tokens_, stride, DType::kF32));
      IndexerLogitsParams lp;
      lp.rows = tokens_;
      lp.heads = spec.heads;
      lp.q = q.as<uint16_t>();
      lp.q_stride = q.ld();
      lp.w = wf.as<float>();
      lp.w_stride = spec.heads;
      lp.format = spec_.indexer_format;
      lp.keys = keys.data();
      lp.k_scale = fp8 ? kscale.as<float>() : nullptr;
      lp.num_keys = total;
      lp.ks = d_ks;
      lp.ke = d_ke;
      lp.logits = logits.as<float>();
      lp.logits_stride = stride;
      SPAR_RETURN_IF_ERROR(LaunchIndexerLogits(lp, stream_));
    }
    SPAR_RETURN_IF_ERROR(MarkOp("indexer.topk"));
    TopKParams tp;
    tp.rows = tokens_;
    tp.k = spec.topk;
    tp.logits = logits.as<float>();
    tp.logits_stride = stride;
    tp.row_start = d_row_start;  // null in the paged case: rows start at 0
    tp.row_len = d_kv_len_;
    tp.num_cols = stride;
    tp.out = out.as<int32_t>();
    tp.out_stride = spec.topk;
    // Few long rows (decode) split each row over several CTAs, which needs scratch.
    Tensor topk_ws;
    if (const size_t ws = TopKWorkspaceBytes(tp); ws > 0) {
      SPAR_ASSIGN_OR_RETURN(topk_ws, NewTensor(1, static_cast<int64_t>(ws), DType::kU8));
      tp.workspace = topk_ws.data();
      tp.workspace_bytes = ws;
    }
    SPAR_RETURN_IF_ERROR(LaunchTopK(tp, stream_));
    SPAR_RETURN_IF_ERROR(glue::PositionsToSlots(out.as<int32_t>(), tokens_, spec.topk, d_seq_, d_tables_,
                                                table_stride_, stream_));
    return out;
  }

  absl::StatusOr<Tensor> SparseMla(int layer, const Tensor& q_abs, const Tensor& indices, float scale) override {
    SPAR_RETURN_IF_ERROR(CheckLayer(layer));
    const int heads = static_cast<int>(q_abs.cols() / 576);
    SPAR_RETURN_IF_ERROR(MarkOp("sparse_mla"));
    SPAR_ASSIGN_OR_RETURN(Tensor out, NewTensor(q_abs.rows(), static_cast<int64_t>(heads) * 512));
    SparseMlaParams p;
    p.q = Bf16(q_abs);
    p.tokens = q_abs.rows();
    p.heads = heads;
    p.q_token_stride = q_abs.ld();
    p.q_head_stride = 576;
    p.format = spec_.latent_format;
    p.cache = latent_[layer].as<uint8_t>();
    p.num_slots = spec_.num_blocks * 64;
    p.indices = indices.as<int32_t>();
    p.indices_stride = indices.ld();
    p.list_len = static_cast<int>(indices.cols());
    p.scale = scale;
    p.out = Bf16Mut(out);
    p.out_token_stride = out.ld();
    p.out_head_stride = 512;
    SPAR_RETURN_IF_ERROR(PlanSparseMlaForDevice(p.tokens, heads, p.list_len, p.format, &p.plan));
    const size_t ws = SparseMlaWorkspaceBytes(p.plan, p.tokens, heads);
    Tensor workspace;
    if (ws > 0) {
      SPAR_ASSIGN_OR_RETURN(workspace, NewTensor(1, static_cast<int64_t>(ws), DType::kU8));
      p.workspace = workspace.data();
      p.workspace_bytes = ws;
    }
    SPAR_RETURN_IF_ERROR(LaunchSparseMla(p, stream_));
    return out;
  }

  absl::StatusOr<Tensor> UnabsorbOutput(const Tensor& o_lat, const Weight& w) override {
    const auto& a = As<CudaAbsorb>(w);
    SPAR_RETURN_IF_ERROR(MarkOp("unabsorb_output"));
    SPAR_ASSIGN_OR_RETURN(Tensor out, NewTensor(o_lat.rows(), static_cast<int64_t>(a.w.heads) * a.w.v_dim));
    SPAR_RETURN_IF_ERROR(LaunchMlaOutUnabsorb(a.w, Bf16(o_lat), o_lat.rows(), o_lat.ld(), 512, Bf16Mut(out), stream_));
    return out;
  }

  // ---- sampling and transfers ----

  absl::StatusOr<std::vector<SampleResult>> Sample(const Tensor& logits,
                                                   const std::vector<SampleRequest>& requests) override {
    if (logits.dtype() != DType::kF32) return absl::InvalidArgumentError("sample: logits must be fp32");
    const int rows = static_cast<int>(requests.size());
    if (rows != logits.rows()) return absl::InvalidArgumentError("sample: one request per logits row");
    if (rows == 0) return std::vector<SampleResult>();
    int top_n = 0;
    std::vector<SamplingRowParams> params(rows);
    std::vector<int32_t> offsets = {0}, ids, pc, oc;
    for (int r = 0; r < rows; ++r) {
      const auto& q = requests[r];
      params[r].temperature = q.params.temperature;
      params[r].top_k = q.params.top_k;
      params[r].top_p = q.params.top_p;
      params[r].min_p = q.params.min_p;
      params[r].repetition_penalty = q.params.repetition_penalty;
      params[r].frequency_penalty = q.params.frequency_penalty;
      params[r].presence_penalty = q.params.presence_penalty;
      params[r].seed = q.params.seed;
      params[r].step = q.step;
      top_n = std::max(top_n, q.top_logprobs);
      if (q.history != nullptr) {
        std::map<int32_t, std::pair<int, int>> merged;
        for (const auto& [id, n] : q.history->prompt_counts) merged[id].first = n;
        for (const auto& [id, n] : q.history->output_counts) merged[id].second = n;
        for (const auto& [id, c] : merged) {
          ids.push_back(id);
          pc.push_back(c.first);
          oc.push_back(c.second);
        }
      }
      offsets.push_back(static_cast<int32_t>(ids.size()));
    }
    // Stream-ordered temporaries (a cudaMalloc/cudaFree pair per step would
    // synchronise the device); pageable uploads are staged at once.
    std::vector<int32_t> hist = offsets;
    hist.insert(hist.end(), ids.begin(), ids.end());
    hist.insert(hist.end(), pc.begin(), pc.end());
    hist.insert(hist.end(), oc.begin(), oc.end());
    const size_t ws = SampleWorkspaceBytes(rows, static_cast<int>(logits.cols()));
    SPAR_ASSIGN_OR_RETURN(Tensor d_params,
                          Upload(params.data(), static_cast<int64_t>(params.size() * sizeof(SamplingRowParams)), DType::kU8));
    SPAR_ASSIGN_OR_RETURN(Tensor d_hist, Upload(hist.data(), static_cast<int64_t>(hist.size()), DType::kI32));
    SPAR_ASSIGN_OR_RETURN(Tensor d_ws, NewTensor(1, static_cast<int64_t>(ws) + 16, DType::kU8));
    // out: tokens [rows], logprobs [rows], top ids [rows, n], top values [rows, n]
    SPAR_ASSIGN_OR_RETURN(Tensor d_out, NewTensor(1, static_cast<int64_t>(rows) * (2 + 2 * top_n) + 4, DType::kI32));
    SampleParams sp;
    sp.logits = logits.as<float>();
    sp.logits_stride = logits.ld();
    sp.rows = rows;
    sp.vocab = static_cast<int>(logits.cols());
    sp.params = d_params.as<SamplingRowParams>();
    const int32_t* h = d_hist.as<int32_t>();
    sp.history_offsets = h;
    sp.history_ids = h + offsets.size();
    sp.history_prompt_counts = sp.history_ids + ids.size();
    sp.history_output_counts = sp.history_prompt_counts + ids.size();
    sp.workspace = d_ws.data();
    sp.workspace_bytes = ws;
    int32_t* o = d_out.as<int32_t>();
    sp.tokens = o;
    sp.token_logprobs = reinterpret_cast<float*>(o + rows);
    sp.top_logprobs = top_n;
    sp.top_logprob_ids = o + 2 * rows;
    sp.top_logprob_values = reinterpret_cast<float*>(o + 2 * rows + rows * top_n);
    SPAR_RETURN_IF_ERROR(LaunchSample(sp, stream_));
    std::vector<int32_t> host(static_cast<size_t>(rows) * (2 + 2 * top_n));
    SPAR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host.data(), o, host.size() * 4, cudaMemcpyDeviceToHost, stream_));
    SPAR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    SPAR_RETURN_IF_ERROR(CheckNotAborted());  // samples of an aborted step are garbage
    std::vector<SampleResult> out(rows);
    for (int r = 0; r < rows; ++r) {
      out[r].token = host[r];
      std::memcpy(&out[r].logprob, &host[rows + r], 4);
      for (int j = 0; j < requests[r].top_logprobs; ++j) {
        float v;
        std::memcpy(&v, &host[2 * rows + rows * top_n + r * top_n + j], 4);
        out[r].top.emplace_back(host[2 * rows + r * top_n + j], v);
      }
    }
    return out;
  }

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

  absl::StatusOr<Tensor> FromHost(const std::vector<float>& data, int64_t rows, int64_t cols) override {
    if (static_cast<int64_t>(data.size()) != rows * cols) return absl::InvalidArgumentError("from host: size mismatch");
    SPAR_ASSIGN_OR_RETURN(Tensor x, NewTensor(rows, cols));
    const auto b = ToBf16(data);
    SPAR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(x.data(), b.data(), b.size() * 2, cudaMemcpyHostToDevice, stream_));
    SPAR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return x;
  }

 private:
  static constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;
  // Larger decode batches gain little from a graph (their kernels are long).
  static constexpr int64_t kMaxGraphTokens = 512;
  static constexpr int64_t kDefaultRopeRows = 32768;

  absl::Status CheckLayer(int layer) const {
    if (layer < 0 || layer >= spec_.num_layers) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", layer, " has no cache"));
    }
    return absl::OkStatus();
  }

  // A pair of events around one all-reduce; read (and recycled) lazily so
  // timing never synchronises the stream.
  struct TimedSpan {
    cudaEvent_t start = nullptr, end = nullptr;
  };
  absl::StatusOr<cudaEvent_t> TakeEvent() {
    if (!free_events_.empty()) {
      cudaEvent_t e = free_events_.back();
      free_events_.pop_back();
      return e;
    }
    cudaEvent_t e;
    SPAR_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
    all_events_.push_back(e);
    return e;
  }
  absl::StatusOr<TimedSpan> StartSpan() {
    // Bound the pending list: resolve it when it grows (a long prefill).
    if (pending_spans_.size() >= 4096) collective_stats();
    TimedSpan s;
    SPAR_ASSIGN_OR_RETURN(s.start, TakeEvent());
    SPAR_ASSIGN_OR_RETURN(s.end, TakeEvent());
    SPAR_CUDA_RETURN_IF_ERROR(cudaEventRecord(s.start, stream_));
    return s;
  }

  absl::Status InitTensorParallel() {
    SPAR_RETURN_IF_ERROR(ValidateTpRank(options_.tp));
    if (options_.tp.size == 1) return absl::OkStatus();
    ncclUniqueId id;
    if (options_.nccl_unique_id.size() != sizeof(id.internal)) {
      return absl::InvalidArgumentError(absl::StrCat("NCCL unique id has ", options_.nccl_unique_id.size(),
                                                     " bytes, expected ", sizeof(id.internal)));
    }
    std::memcpy(id.internal, options_.nccl_unique_id.data(), sizeof(id.internal));
    const ncclResult_t r = ncclCommInitRank(&comm_, options_.tp.size, id, options_.tp.rank);
    if (r != ncclSuccess) {
      comm_ = nullptr;
      return absl::UnavailableError(absl::StrCat("rank ", options_.tp.rank, " of ", options_.tp.size,
                                                 " could not join the NCCL group: ", ncclGetErrorString(r)));
    }
    return absl::OkStatus();
  }

  CudaBackendOptions options_;
  int64_t used_at_init_ = 0;
  DeviceMemoryUsage memory_;
  ncclComm_t comm_ = nullptr;
  CollectiveStats stats_;
  std::vector<TimedSpan> pending_spans_;
  std::vector<cudaEvent_t> free_events_, all_events_;
  std::string device_name_;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer gemm_workspace_;
  ref::RopeParams rope_;
  DeviceBuffer inv_freq_, rope_cos_, rope_sin_;
  int64_t rope_rows_ = 0;
  CacheSpec spec_;
  std::vector<DeviceBuffer> latent_, indexer_;
  // Step metadata.
  const StepPlan* plan_ = nullptr;
  int64_t tokens_ = 0, num_seqs_ = 0, table_stride_ = 1, max_ctx_ = 0;
  bool all_single_ = true;
  std::vector<int32_t> host_meta_;
  DeviceBuffer meta_;
  // Decode CUDA graphs (RunStep).
  std::map<DecodeGraphKey, std::unique_ptr<DecodeGraph>> graphs_;
  std::set<DecodeGraphKey> uncapturable_;
  uint64_t graph_clock_ = 0;
  bool capturing_ = false;
  bool op_profile_ = false;
  std::vector<std::pair<std::string, cudaEvent_t>> op_marks_;
  std::atomic<bool> aborted_{false};
  std::shared_ptr<CommAbort> comm_abort_;  // set once, by AbortCollectives
  int steps_since_collective_sample_ = 0;
  std::vector<double> recent_collectives_;
  static constexpr size_t kMaxRecentCollectives = 8192;
  StepGraphStats graph_stats_;
  const int32_t *d_ids_ = nullptr, *d_pos_ = nullptr, *d_slots_ = nullptr, *d_seq_ = nullptr, *d_kv_len_ = nullptr,
                *d_logit_rows_ = nullptr, *d_tables_ = nullptr;
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
