// Index lists as cache slots (indexer.h, section 7) for contexts that fit
// in k: every visible position, as the slot sparse MLA reads.
#include "kernels/cuda/common/arch.cuh"

#include <cstdint>

#include "base/cache_layout.h"
#include "base/status_macros.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/invalid_arg.h"
#include "kernels/cuda/indexer/indexer.h"

namespace spar {
namespace {

__global__ void DenseSlotsKernel(int32_t* idx, int k, const int32_t* kv_len, const int32_t* token_seq,
                                 const int32_t* block_table, int64_t stride) {
  const int64_t t = blockIdx.x;
  const int32_t* table = block_table + token_seq[t] * stride;
  const int32_t n = kv_len[t];
  for (int j = threadIdx.x; j < k; j += blockDim.x) idx[t * k + j] = j < n ? table[j / kCacheBlockTokens] * kCacheBlockTokens + j % kCacheBlockTokens : -1;
}

absl::Status CheckSlotArgs(absl::string_view op, const int32_t* idx, int64_t tokens, int k, const int32_t* token_seq,
                           const int32_t* block_table, int64_t stride) {
  if (tokens < 0 || tokens > (int64_t{1} << 31) - 1) return InvalidParam(op, "tokens", "must be in [0, 2^31)");
  if (k < 0) return InvalidParam(op, "k", "must be >= 0");
  if (tokens == 0 || k == 0) return absl::OkStatus();
  if (idx == nullptr || token_seq == nullptr || block_table == nullptr) {
    return InvalidParam(op, "idx/token_seq/block_table", "is null");
  }
  if (stride < 1) return InvalidParam(op, "block_table_stride", "must be >= 1");
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchDenseSlots(int32_t* idx, int64_t tokens, int k, const int32_t* kv_len, const int32_t* token_seq,
                              const int32_t* block_table, int64_t block_table_stride, cudaStream_t stream) {
  SPAR_RETURN_IF_ERROR(CheckSlotArgs("DenseSlots", idx, tokens, k, token_seq, block_table, block_table_stride));
  if (tokens == 0 || k == 0) return absl::OkStatus();
  if (kv_len == nullptr) return InvalidParam("DenseSlots", "kv_len", "is null");
  DenseSlotsKernel<<<static_cast<unsigned>(tokens), 256, 0, stream>>>(idx, k, kv_len, token_seq, block_table,
                                                                       block_table_stride);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("DenseSlotsKernel");
  return absl::OkStatus();
}

}  // namespace spar
