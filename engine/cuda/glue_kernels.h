// Small element-wise kernels the cuda backend needs between the op
// families: residual add, row gather, position -> cache slot conversion and
// the dense index list of short contexts.
#ifndef SPAR_ENGINE_CUDA_GLUE_KERNELS_H_
#define SPAR_ENGINE_CUDA_GLUE_KERNELS_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"

namespace spar::glue {

// acc[r][c] += x[r][c] (bf16 in, fp32 add, bf16 out).
absl::Status AddBf16(uint16_t* acc, int64_t ld_acc, const uint16_t* x, int64_t ldx, int64_t rows, int64_t cols,
                     cudaStream_t stream);

// out[r][c] = bf16(x[r][c]) (contiguous rows).
absl::Status F32ToBf16(const float* x, int64_t n, uint16_t* out, cudaStream_t stream);

// out[i] = x[rows[i]] for element size 2 (bf16) or 4 (fp32).
absl::Status GatherRows(const void* x, int64_t ldx, const int32_t* rows, int64_t num_rows, int64_t cols,
                        int elem_bytes, void* out, int64_t ld_out, cudaStream_t stream);

// idx[t][j] = position p >= 0 -> block_table[token_seq[t]][p / 64] * 64 + p % 64; -1 stays -1.
absl::Status PositionsToSlots(int32_t* idx, int64_t tokens, int k, const int32_t* token_seq,
                              const int32_t* block_table, int64_t block_table_stride, cudaStream_t stream);

// idx[t][j] = slot of position j for j < kv_len[t] (ascending), else -1.
absl::Status DenseSlots(int32_t* idx, int64_t tokens, int k, const int32_t* kv_len, const int32_t* token_seq,
                        const int32_t* block_table, int64_t block_table_stride, cudaStream_t stream);

// Keeps the GPU busy for about `ns` nanoseconds (one thread sleeping): the
// op profile puts it before a step so that the host's enqueueing is hidden.
absl::Status SpinWait(int64_t ns, cudaStream_t stream);

}  // namespace spar::glue

#endif  // SPAR_ENGINE_CUDA_GLUE_KERNELS_H_
