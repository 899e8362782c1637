// A grouped (MoE) launch's work entry, as both W8A16 kernels read it
// (internal to kernels/cuda/gemm).
#ifndef SPAR_KERNELS_CUDA_GEMM_GROUPED_WORK_CUH_
#define SPAR_KERNELS_CUDA_GEMM_GROUPED_WORK_CUH_

#include <cstdint>

#include "kernels/cuda/gemm/gemm_launch_internal.h"

namespace spar::gemm::internal {

struct GroupedWork {
  int64_t first_row;  // the entry's first permuted row (its output row 0)
  int rows;           // permuted rows it holds
};

// Entry `entry` of p.work ({expert, first permuted row, rows, 0}): moves
// `seg` to that expert's weights and scales.
__device__ __forceinline__ GroupedWork ApplyWorkEntry(const KernelParams& p, unsigned entry, KernelSegment& seg) {
  const int4 wk = reinterpret_cast<const int4*>(p.work)[entry];
  seg.w += wk.x * p.expert_w_stride_bytes;
  if (seg.w_up != nullptr) seg.w_up += wk.x * p.expert_w_stride_bytes;
  if (seg.scale != nullptr) seg.scale += wk.x * p.expert_scale_stride;
  if (seg.scale_up != nullptr) seg.scale_up += wk.x * p.expert_scale_stride;
  return {wk.y, wk.z};
}

}  // namespace spar::gemm::internal

#endif  // SPAR_KERNELS_CUDA_GEMM_GROUPED_WORK_CUH_
