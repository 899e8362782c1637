// The split top-k path (internal to kernels/cuda/indexer): several CTAs per
// row, see topk_plan.h for the three kernels and topk_split.cu for them.
#ifndef SPAR_KERNELS_CUDA_INDEXER_TOPK_SPLIT_H_
#define SPAR_KERNELS_CUDA_INDEXER_TOPK_SPLIT_H_

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "kernels/cuda/indexer/indexer.h"
#include "kernels/cuda/indexer/topk_plan.h"

namespace spar::topk {

// p validated by LaunchTopK, plan.split() true, p.workspace holding at least
// TopKSplitWorkspaceLayout(plan, p.rows).total bytes.
absl::Status LaunchTopKSplit(const TopKParams& p, const TopKSplitPlan& plan, cudaStream_t stream);

}  // namespace spar::topk

#endif  // SPAR_KERNELS_CUDA_INDEXER_TOPK_SPLIT_H_
