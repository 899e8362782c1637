#include "engine/cuda/glue_kernels.h"

#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/common/arch.cuh"
#include "kernels/cuda/common/cuda_status.h"

namespace spar::glue {
namespace {

__global__ void AddBf16Kernel(__nv_bfloat16* acc, int64_t ld_acc, const __nv_bfloat16* x, int64_t ldx,
                              int64_t cols) {
  const int64_t r = blockIdx.x;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = __bfloat162float(acc[r * ld_acc + c]) + __bfloat162float(x[r * ldx + c]);
    acc[r * ld_acc + c] = __float2bfloat16(v);
  }
}

__global__ void F32ToBf16Kernel(const float* x, int64_t n, __nv_bfloat16* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = __float2bfloat16(x[i]);
  }
}

__global__ void GatherRowsKernel(const char* x, int64_t ldx_bytes, const int32_t* rows, int64_t row_bytes,
                                 char* out, int64_t ld_out_bytes) {
  const int64_t i = blockIdx.x;
  const char* src = x + rows[i] * ldx_bytes;
  char* dst = out + i * ld_out_bytes;
  for (int64_t b = threadIdx.x; b < row_bytes; b += blockDim.x) dst[b] = src[b];
}

__global__ void PositionsToSlotsKernel(int32_t* idx, int k, const int32_t* token_seq, const int32_t* block_table,
                                       int64_t stride) {
  const int64_t t = blockIdx.x;
  const int32_t* table = block_table + token_seq[t] * stride;
  for (int j = threadIdx.x; j < k; j += blockDim.x) {
    const int32_t p = idx[t * k + j];
    if (p >= 0) idx[t * k + j] = table[p / 64] * 64 + p % 64;
  }
}

__global__ void DenseSlotsKernel(int32_t* idx, int k, const int32_t* kv_len, const int32_t* token_seq,
                                 const int32_t* block_table, int64_t stride) {
  const int64_t t = blockIdx.x;
  const int32_t* table = block_table + token_seq[t] * stride;
  const int32_t n = kv_len[t];
  for (int j = threadIdx.x; j < k; j += blockDim.x) idx[t * k + j] = j < n ? table[j / 64] * 64 + j % 64 : -1;
}

}  // namespace

absl::Status AddBf16(uint16_t* acc, int64_t ld_acc, const uint16_t* x, int64_t ldx, int64_t rows, int64_t cols,
                     cudaStream_t stream) {
  if (rows == 0) return absl::OkStatus();
  AddBf16Kernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(reinterpret_cast<__nv_bfloat16*>(acc), ld_acc,
                                                                  reinterpret_cast<const __nv_bfloat16*>(x), ldx, cols);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("AddBf16Kernel");
  return absl::OkStatus();
}

absl::Status F32ToBf16(const float* x, int64_t n, uint16_t* out, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 4096);
  F32ToBf16Kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(x, n, reinterpret_cast<__nv_bfloat16*>(out));
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("F32ToBf16Kernel");
  return absl::OkStatus();
}

__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void SpinWaitKernel(int64_t ns) {
  // %globaltimer counts nanoseconds (coarsely: ~1 us steps), enough here.
  const uint64_t start = GlobalTimerNs();
  while (GlobalTimerNs() - start < static_cast<uint64_t>(ns)) __nanosleep(1000);
}

absl::Status SpinWait(int64_t ns, cudaStream_t stream) {
  SpinWaitKernel<<<1, 1, 0, stream>>>(ns);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("SpinWaitKernel");
  return absl::OkStatus();
}

absl::Status GatherRows(const void* x, int64_t ldx, const int32_t* rows, int64_t num_rows, int64_t cols,
                        int elem_bytes, void* out, int64_t ld_out, cudaStream_t stream) {
  if (num_rows == 0) return absl::OkStatus();
  GatherRowsKernel<<<static_cast<unsigned>(num_rows), 256, 0, stream>>>(
      static_cast<const char*>(x), ldx * elem_bytes, rows, cols * elem_bytes, static_cast<char*>(out),
      ld_out * elem_bytes);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("GatherRowsKernel");
  return absl::OkStatus();
}

absl::Status PositionsToSlots(int32_t* idx, int64_t tokens, int k, const int32_t* token_seq,
                              const int32_t* block_table, int64_t block_table_stride, cudaStream_t stream) {
  if (tokens == 0) return absl::OkStatus();
  PositionsToSlotsKernel<<<static_cast<unsigned>(tokens), 256, 0, stream>>>(idx, k, token_seq, block_table,
                                                                             block_table_stride);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("PositionsToSlotsKernel");
  return absl::OkStatus();
}

absl::Status DenseSlots(int32_t* idx, int64_t tokens, int k, const int32_t* kv_len, const int32_t* token_seq,
                        const int32_t* block_table, int64_t block_table_stride, cudaStream_t stream) {
  if (tokens == 0) return absl::OkStatus();
  DenseSlotsKernel<<<static_cast<unsigned>(tokens), 256, 0, stream>>>(idx, k, kv_len, token_seq, block_table,
                                                                       block_table_stride);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("DenseSlotsKernel");
  return absl::OkStatus();
}

}  // namespace spar::glue
