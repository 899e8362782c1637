// The top-k paths besides the one-CTA kernel of topk.cu (internal to
// kernels/cuda/indexer; LaunchTopK picks one): the split path (several CTAs
// per row, topk_plan.h, topk_split.cu) and the short-row path (topk_short.cu).
#ifndef SPAR_KERNELS_CUDA_INDEXER_TOPK_PATHS_H_
#define SPAR_KERNELS_CUDA_INDEXER_TOPK_PATHS_H_

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "kernels/cuda/indexer/indexer.h"
#include "kernels/cuda/indexer/topk_plan.h"

namespace spar::topk {

// p validated by LaunchTopK, plan.split() true, p.workspace holding at least
// TopKSplitWorkspaceLayout(plan, p.rows).total bytes.
absl::Status LaunchTopKSplit(const TopKParams& p, const TopKSplitPlan& plan, cudaStream_t stream);

// p validated by LaunchTopK, p.num_cols <= kTopKShortMaxLen; no workspace.
absl::Status LaunchTopKShort(const TopKParams& p, cudaStream_t stream);

}  // namespace spar::topk

#endif  // SPAR_KERNELS_CUDA_INDEXER_TOPK_PATHS_H_
