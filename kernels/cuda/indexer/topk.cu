// Row-wise exact top-k (ref::TopK semantics): the launcher and the one-CTA
// path. The key mapping, the radix select and the tie rule are described in
// topk_device.cuh; rows of at most kTopKShortMaxLen positions take the
// short-row path (topk_short.cu), and few long rows the row-group path or the
// split path (several CTAs per row, chosen by PlanTopKSplit: topk_group.cu,
// topk_split.cu).
//
// One-CTA path (long rows): one 1024-thread CTA per row.
//   pass A (global):  histogram of bits [31:21];
//   pass B (global):  positions above the chosen bucket are surely selected
//                     (bit set in a smem position bitmap); the bucket's
//                     (key, position) pairs are copied to smem when they fit
//                     (kCandCap) while bits [20:10] are histogrammed;
//   then levels 2-3 and the final marking run on the smem candidates. A
//   bucket too large to copy (heavy ties, narrow ranges) makes that level
//   re-read the row instead.
// Histograms are replicated 8 ways (lane & 7) to spread same-bin atomics,
// and pass A adds runs of equal bins at once (BinRun).
// Rows are read with 16-byte loads, 8 in flight per thread, so a row costs
// two trips over memory in the common case.
#include "kernels/cuda/common/arch.cuh"

#include <cstdint>

#include "base/status_macros.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_info.h"
#include "kernels/cuda/common/invalid_arg.h"
#include "kernels/cuda/indexer/indexer.h"
#include "kernels/cuda/indexer/indexer_common.cuh"
#include "kernels/cuda/indexer/topk_device.cuh"
#include "kernels/cuda/indexer/topk_plan.h"
#include "kernels/cuda/indexer/topk_paths.h"

namespace spar {
namespace {

using namespace topk;  // NOLINT: the kernel pieces

static __global__ void __launch_bounds__(kRowThreads, 1) TopKKernel(const TopKParams p) {
  extern __shared__ __align__(16) uint32_t smem_u32[];
  __shared__ uint32_t scratch[33];
  __shared__ uint32_t ncand;
  __shared__ Select sel;
  const RowSmem m = CarveRowSmem(smem_u32, scratch, &ncand, &sel);

  const int64_t row = blockIdx.x;
  const int lane = threadIdx.x & 31;
  const int len = RowLen(p, row);
  const float* x = RowPtr(p, row);
  const int copy = lane & (kCopies - 1);

  // Pass A: level-1 histogram of the valid keys.
  ZeroWords<kRowThreads>(m.hist, kHistWords);
  ZeroWords<kRowThreads>(m.sel_bits, kBitmapWords);
  if (threadIdx.x == 0) ncand = 0;
  __syncthreads();
  BinRun<kCopies> run;
  ForEachKey<kRowThreads>(x, len, [&](uint32_t key, int) { run.Add(m.hist, copy, key); });
  run.Flush(m.hist, copy);
  __syncthreads();
  const Select s = FindBucket<kRowThreads, kCopies>(m.hist, kTopKBins, static_cast<uint32_t>(p.k), scratch, &sel);
  FinishRow(p, row, x, len, s, /*marked=*/false, /*cand=*/nullptr, 0, m);
}

absl::Status ValidateTopK(const TopKParams& p) {
  const char* op = "LaunchTopK";
  if (p.rows < 0) return InvalidParam(op, "rows", "must be >= 0");
  if (p.k < 1 || p.k > kIndexerMaxTopK) return InvalidParam(op, "k", "must be in [1, 2048]");
  if (p.rows > INT32_MAX) return InvalidParam(op, "rows", "too large");
  if (p.num_cols < 0 || p.num_cols > kTopKMaxLen) return InvalidParam(op, "num_cols", "must be in [0, 262144]");
  if (p.split_chunks < 0) return InvalidParam(op, "split_chunks", "must be >= 0");
  if (p.plan != nullptr && (p.plan->split() || p.plan->group()) && p.plan->chunks * p.plan->chunk_len < p.num_cols)
    return InvalidParam(op, "plan", "does not cover num_cols (not PlanTopKSplit of these rows)");
  if (p.plan != nullptr && p.plan->group() &&
      (!IsTopKGroupKeys(p.plan->group_keys) || p.plan->chunk_len != int64_t{p.plan->group_keys} * kTopKGroupThreads))
    return InvalidParam(op, "plan", "is not a row-group plan (TopKGroupPlan)");
  if (p.rows == 0) return absl::OkStatus();
  if (p.logits == nullptr || reinterpret_cast<uintptr_t>(p.logits) % 4 != 0)
    return InvalidParam(op, "logits", "must be non-null and 4-byte aligned");
  if (p.out == nullptr) return InvalidParam(op, "out", "is null");
  if (p.out_stride < p.k) return InvalidParam(op, "out_stride", "must be >= k");
  // A row starting at column 0 may be read up to num_cols whatever its length.
  if (p.row_start == nullptr && p.num_cols > p.logits_stride)
    return InvalidParam(op, "num_cols", "must be <= logits_stride (rows are read up to num_cols)");
  if (p.block_table != nullptr && (p.rows_per_seq < 1 || p.block_table_stride < 1))
    return InvalidParam(op, "rows_per_seq/block_table_stride", "must be >= 1 with a block_table");
  if (p.token_seq != nullptr && p.block_table == nullptr) return InvalidParam(op, "token_seq", "needs a block_table");
  if (p.workspace != nullptr && reinterpret_cast<uintptr_t>(p.workspace) % 16 != 0)
    return InvalidParam(op, "workspace", "must be 16-byte aligned");
  return absl::OkStatus();
}

TopKSplitPlan PlanFor(const TopKParams& p) {
  return p.plan != nullptr ? *p.plan : PlanTopKSplit(p.rows, p.num_cols, CurrentDeviceInfo().sm_count, p.split_chunks);
}

}  // namespace

bool TopKSupported(const TopKParams& p) {
  return p.k >= 1 && p.k <= kIndexerMaxTopK && p.num_cols >= 0 && p.num_cols <= kTopKMaxLen;
}

size_t TopKWorkspaceBytes(const TopKParams& p) {
  if (p.rows <= 0 || p.num_cols <= 0) return 0;
  const TopKSplitPlan plan = PlanFor(p);
  if (plan.group()) return TopKGroupWorkspaceLayout(plan, p.rows).total;
  return TopKSplitWorkspaceLayout(plan, p.rows).total;
}

absl::Status LaunchTopK(const TopKParams& p, cudaStream_t stream) {
  SPAR_RETURN_IF_ERROR(ValidateTopK(p));
  if (p.rows == 0) return absl::OkStatus();
  const TopKSplitPlan plan = PlanFor(p);
  const bool short_row = p.split_chunks == 0 && p.num_cols <= kTopKShortMaxLen && !plan.split();
  if (short_row && (!plan.group() || p.workspace == nullptr)) return topk::LaunchTopKShort(p, stream);
  // No workspace: the one-CTA path, always correct, only slower for few rows.
  if (p.workspace != nullptr) {
    if (plan.group()) {
      const size_t need = TopKGroupWorkspaceLayout(plan, p.rows).total;
      if (p.workspace_bytes < need)
        return InvalidParam("LaunchTopK", "workspace_bytes", "is below TopKWorkspaceBytes(params)");
      SPAR_ASSIGN_OR_RETURN(const bool fits, topk::TopKGroupFits(plan, p.rows, CurrentDeviceInfo().sm_count));
      // A grid the device cannot hold at once would not pass its barriers:
      // the short-row or the one-CTA path serves it (never the planner's choice).
      if (fits) return topk::LaunchTopKGroup(p, plan, stream);
      if (short_row) return topk::LaunchTopKShort(p, stream);
    }
    if (plan.split()) {
      const size_t need = TopKSplitWorkspaceLayout(plan, p.rows).total;
      if (p.workspace_bytes < need)
        return InvalidParam("LaunchTopK", "workspace_bytes", "is below TopKWorkspaceBytes(params)");
      return topk::LaunchTopKSplit(p, plan, stream);
    }
  }
  static indexer_internal::SmemOptIn opt_in;
  SPAR_CUDA_RETURN_IF_ERROR(opt_in.Ensure(TopKKernel, kRowSmemBytes));
  TopKKernel<<<static_cast<unsigned>(p.rows), kRowThreads, kRowSmemBytes, stream>>>(p);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("TopKKernel");
  return absl::OkStatus();
}

}  // namespace spar
