#include "engine/cuda/step_context.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda/common/cuda_status.h"

namespace spar {

absl::StatusOr<Tensor> StepContext::NewTensor(int64_t rows, int64_t cols, DType dtype) {
  const size_t bytes = std::max<size_t>(static_cast<size_t>(rows * cols) * DTypeSize(dtype), 16);
  void* p = nullptr;
  SPAR_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&p, bytes, stream));
  std::shared_ptr<void> storage(p, [free_on = free_stream_](void* q) { cudaFreeAsync(q, *free_on); });
  return Tensor(dtype, rows, cols, std::move(storage), p, cols);
}

absl::Status StepContext::Concurrently(const std::function<absl::Status()>& side,
                                       const std::function<absl::Status()>& main) {
  if (branches == nullptr || !OverlapBranches(overlap_branches, profiling(), meta.tokens)) {
    SPAR_RETURN_IF_ERROR(side());
    return main();
  }
  const cudaStream_t home = stream;
  void* const home_workspace = gemm_workspace;
  const size_t home_workspace_bytes = gemm_workspace_bytes;
  SPAR_RETURN_IF_ERROR(branches->Fork(home));
  SetStream(branches->side());
  gemm_workspace = branches->gemm_workspace();
  gemm_workspace_bytes = branches->gemm_workspace_bytes();
  const absl::Status side_status = side();
  SetStream(home);
  gemm_workspace = home_workspace;
  gemm_workspace_bytes = home_workspace_bytes;
  // After a failed side branch the main one is skipped, but the join below
  // still closes the fork (a capture must not end with the side stream
  // unjoined); the first error is returned.
  const absl::Status main_status = side_status.ok() ? main() : absl::OkStatus();
  SPAR_RETURN_IF_ERROR(branches->Join(home));
  SPAR_RETURN_IF_ERROR(side_status);
  return main_status;
}

absl::StatusOr<Tensor> StepContext::Upload(const void* host, int64_t count, DType dtype) {
  SPAR_ASSIGN_OR_RETURN(Tensor t, NewTensor(1, count, dtype));
  SPAR_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(t.data(), host, static_cast<size_t>(count) * DTypeSize(dtype), cudaMemcpyHostToDevice, stream));
  return t;
}

absl::Status StepContext::CopyRowsTo(const Tensor& x, void* dst, int64_t ld_dst) {
  const size_t elem = DTypeSize(x.dtype());
  SPAR_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(dst, ld_dst * elem, x.data(), x.ld() * elem, x.cols() * elem, x.rows(),
                                              cudaMemcpyDeviceToDevice, stream));
  return absl::OkStatus();
}

absl::StatusOr<Tensor> StepContext::Clone(const Tensor& x) {
  SPAR_ASSIGN_OR_RETURN(Tensor out, NewTensor(x.rows(), x.cols(), x.dtype()));
  SPAR_RETURN_IF_ERROR(CopyRowsTo(x, out.data(), out.ld()));
  return out;
}

absl::Status StepContext::ScanPlan(const StepPlan& plan) {
  meta.plan = &plan;
  meta.tokens = plan.num_tokens();
  meta.num_seqs = static_cast<int64_t>(plan.seqs.size());
  meta.table_stride = 1;
  meta.tokens_per_seq = plan.seqs.empty() ? 0 : static_cast<int64_t>(plan.seqs[0].tokens.size());
  meta.max_ctx = 0;
  mla_plan_.reset();
  topk_plan_.reset();
  const int64_t num_blocks = caches->spec().num_blocks;
  for (const auto& q : plan.seqs) {
    meta.table_stride = std::max<int64_t>(meta.table_stride, static_cast<int64_t>(q.block_table.size()));
    for (int32_t b : q.block_table) {
      if (b < 0 || b >= num_blocks) return absl::InvalidArgumentError(absl::StrCat("block ", b, " out of range"));
    }
    if (static_cast<int64_t>(q.tokens.size()) != meta.tokens_per_seq) meta.tokens_per_seq = 0;
  }
  for (int32_t p : plan.positions) {
    if (p >= rope->rows()) {
      return absl::InvalidArgumentError(absl::StrCat("position ", p, " beyond the RoPE tables (", rope->rows(), ")"));
    }
    meta.max_ctx = std::max<int64_t>(meta.max_ctx, p + 1);
  }
  return absl::OkStatus();
}

absl::Status StepContext::UploadStepMetadata(const StepPlan& plan, int64_t stride, DeviceBuffer* dst, bool may_grow) {
  host_meta_.clear();
  auto put = [&](const std::vector<int32_t>& v) {
    const size_t at = host_meta_.size();
    host_meta_.insert(host_meta_.end(), v.begin(), v.end());
    while (host_meta_.size() % 4) host_meta_.push_back(0);  // 16-byte aligned sections
    return at;
  };
  const int64_t tokens = meta.tokens, num_seqs = meta.num_seqs;
  std::vector<int32_t> kv_len(tokens);
  for (int64_t t = 0; t < tokens; ++t) kv_len[t] = plan.positions[t] + 1;
  std::vector<int32_t> tables(static_cast<size_t>(num_seqs * stride), 0);
  for (int64_t s = 0; s < num_seqs; ++s) {
    std::copy(plan.seqs[s].block_table.begin(), plan.seqs[s].block_table.end(), tables.begin() + s * stride);
  }
  const size_t o_ids = put(plan.token_ids), o_pos = put(plan.positions), o_slots = put(plan.slots),
               o_seq = put(plan.token_seq), o_kv = put(kv_len), o_logit = put(plan.logit_rows), o_tab = put(tables);
  const size_t bytes = host_meta_.size() * 4;
  if (bytes > dst->bytes()) {
    if (!may_grow) {
      return absl::InternalError(
          absl::StrCat("step metadata of ", bytes, " bytes does not fit its graph's ", dst->bytes(), " bytes"));
    }
    SPAR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));  // the old buffer may still be read
    SPAR_RETURN_IF_ERROR(dst->Allocate(std::max<size_t>(bytes * 2, 1 << 16)));
  }
  SPAR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst->as<void>(), host_meta_.data(), bytes, cudaMemcpyHostToDevice, stream));
  int32_t* base = dst->as<int32_t>();
  meta.ids = base + o_ids;
  meta.pos = base + o_pos;
  meta.slots = base + o_slots;
  meta.seq = base + o_seq;
  meta.kv_len = base + o_kv;
  meta.logit_rows = base + o_logit;
  meta.tables = base + o_tab;
  meta.table_stride = stride;
  return absl::OkStatus();
}

const SparseMlaPlan& StepContext::SparseMlaPlanFor(int64_t tokens, int heads, int list_len, LatentFormat format) {
  const MlaPlanKey key{tokens, heads, list_len, format};
  if (!mla_plan_ || !(mla_plan_->first == key)) {
    mla_plan_.emplace(key, PlanSparseMla(tokens, heads, list_len, device.sm_count, device.smem_per_sm,
                                         format == LatentFormat::kFp8Ds));
  }
  return mla_plan_->second;
}

const TopKSplitPlan& StepContext::TopKPlanFor(int64_t rows, int64_t num_cols) {
  const std::pair<int64_t, int64_t> key{rows, num_cols};
  if (!topk_plan_ || topk_plan_->first != key) topk_plan_.emplace(key, PlanTopKSplit(rows, num_cols, device.sm_count));
  return topk_plan_->second;
}

}  // namespace spar
