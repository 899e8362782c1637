// The top-k paths besides the one-CTA kernel of topk.cu (internal to
// kernels/cuda/indexer; LaunchTopK picks one): the split path (several CTAs
// per row, topk_plan.h, topk_split.cu), the row-group path (several
// resident CTAs per row in one launch, topk_group.cu) and the short-row path
// (topk_short.cu).
#ifndef SPAR_KERNELS_CUDA_INDEXER_TOPK_PATHS_H_
#define SPAR_KERNELS_CUDA_INDEXER_TOPK_PATHS_H_

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/indexer/indexer.h"
#include "kernels/cuda/indexer/topk_plan.h"

namespace spar::topk {

// p validated by LaunchTopK, plan.split() true, p.workspace holding at least
// TopKSplitWorkspaceLayout(plan, p.rows).total bytes.
absl::Status LaunchTopKSplit(const TopKParams& p, const TopKSplitPlan& plan, cudaStream_t stream);

// p validated by LaunchTopK, p.num_cols <= kTopKShortMaxLen; no workspace.
absl::Status LaunchTopKShort(const TopKParams& p, cudaStream_t stream);

// Whether the row-group plan's rows x chunks CTAs are resident at once on a
// device of sm_count SMs (the cooperative launch's condition).
absl::StatusOr<bool> TopKGroupFits(const TopKSplitPlan& plan, int64_t rows, int sm_count);

// p validated by LaunchTopK, plan.group() true and TopKGroupFits, p.workspace
// holding at least TopKGroupWorkspaceLayout(plan, p.rows).total bytes.
absl::Status LaunchTopKGroup(const TopKParams& p, const TopKSplitPlan& plan, cudaStream_t stream);

}  // namespace spar::topk

#endif  // SPAR_KERNELS_CUDA_INDEXER_TOPK_PATHS_H_
