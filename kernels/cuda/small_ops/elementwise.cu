// The element-wise glue kernels of small_ops.h: what the cuda backend needs
// between the op families (the residual add of a tensor-parallel rank, the
// bf16 rounding after an fp32 all-reduce, the rows that want logits).
#include "kernels/cuda/common/arch.cuh"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/invalid_arg.h"
#include "kernels/cuda/small_ops/small_ops.h"

namespace spar {
namespace {

// Block (c, y) adds columns [c * 256 * kPer, ...) of rows y, y + gridDim.y,
// ..., kPer per thread: a decode row (1 x 6144) is a few blocks of one
// element group per thread instead of one block walking the row (~10 us of
// serial loads).
template <int kPer>
__global__ void AddBf16Kernel(__nv_bfloat16* acc, int64_t ld_acc, const __nv_bfloat16* x, int64_t ldx,
                              int64_t rows, int64_t cols) {
  const int64_t c0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kPer;
  if (c0 >= cols) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    __nv_bfloat16* a = acc + r * ld_acc + c0;
    const __nv_bfloat16* b = x + r * ldx + c0;
    if constexpr (kPer == 8) {  // 16-byte rows (the launcher checked)
      uint4 av = *reinterpret_cast<const uint4*>(a);
      const uint4 bv = *reinterpret_cast<const uint4*>(b);
      __nv_bfloat162* ah = reinterpret_cast<__nv_bfloat162*>(&av);
      const __nv_bfloat162* bh = reinterpret_cast<const __nv_bfloat162*>(&bv);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 fa = __bfloat1622float2(ah[i]), fb = __bfloat1622float2(bh[i]);
        ah[i] = __floats2bfloat162_rn(fa.x + fb.x, fa.y + fb.y);
      }
      *reinterpret_cast<uint4*>(a) = av;
    } else {
      a[0] = __float2bfloat16(__bfloat162float(a[0]) + __bfloat162float(b[0]));
    }
  }
}

__global__ void CastF32ToBf16Kernel(const float* x, int64_t n, __nv_bfloat16* out) {
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

// One block per row: the grid's x dimension holds up to 2^31 - 1 blocks.
constexpr int64_t kMaxRows = (int64_t{1} << 31) - 1;

}  // namespace

absl::Status LaunchAddBf16(__nv_bfloat16* acc, int64_t ld_acc, const __nv_bfloat16* x, int64_t ldx, int64_t rows,
                           int64_t cols, cudaStream_t stream) {
  constexpr absl::string_view kOp = "AddBf16";
  if (rows < 0 || rows > kMaxRows) return InvalidParam(kOp, "rows", "must be in [0, 2^31)");
  if (cols < 0) return InvalidParam(kOp, "cols", "must be >= 0");
  if (rows == 0 || cols == 0) return absl::OkStatus();
  if (acc == nullptr || x == nullptr) return InvalidParam(kOp, "acc/x", "is null");
  if (ld_acc < cols || ldx < cols) return InvalidParam(kOp, "ld_acc/ldx", "must be >= cols");
  const bool vec = cols % 8 == 0 && ld_acc % 8 == 0 && ldx % 8 == 0 && reinterpret_cast<uintptr_t>(acc) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const int64_t per = vec ? 8 : 1;
  const dim3 grid(static_cast<unsigned>((cols / per + 255) / 256), static_cast<unsigned>(std::min<int64_t>(rows, 65535)));
  if (vec) {
    AddBf16Kernel<8><<<grid, 256, 0, stream>>>(acc, ld_acc, x, ldx, rows, cols);
  } else {
    AddBf16Kernel<1><<<grid, 256, 0, stream>>>(acc, ld_acc, x, ldx, rows, cols);
  }
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("AddBf16Kernel");
  return absl::OkStatus();
}

absl::Status LaunchCastF32ToBf16(const float* x, int64_t n, __nv_bfloat16* out, cudaStream_t stream) {
  constexpr absl::string_view kOp = "CastF32ToBf16";
  if (n < 0) return InvalidParam(kOp, "n", "must be >= 0");
  if (n == 0) return absl::OkStatus();
  if (x == nullptr || out == nullptr) return InvalidParam(kOp, "x/out", "is null");
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 4096);
  CastF32ToBf16Kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(x, n, out);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("CastF32ToBf16Kernel");
  return absl::OkStatus();
}

absl::Status LaunchGatherRows(const void* x, int64_t ldx, const int32_t* rows, int64_t num_rows, int64_t cols,
                              int elem_bytes, void* out, int64_t ld_out, cudaStream_t stream) {
  constexpr absl::string_view kOp = "GatherRows";
  if (num_rows < 0 || num_rows > kMaxRows) return InvalidParam(kOp, "num_rows", "must be in [0, 2^31)");
  if (cols < 0) return InvalidParam(kOp, "cols", "must be >= 0");
  if (elem_bytes != 2 && elem_bytes != 4) return InvalidParam(kOp, "elem_bytes", "must be 2 or 4");
  if (num_rows == 0 || cols == 0) return absl::OkStatus();
  if (x == nullptr || rows == nullptr || out == nullptr) return InvalidParam(kOp, "x/rows/out", "is null");
  if (ldx < cols || ld_out < cols) return InvalidParam(kOp, "ldx/ld_out", "must be >= cols");
  GatherRowsKernel<<<static_cast<unsigned>(num_rows), 256, 0, stream>>>(
      static_cast<const char*>(x), ldx * elem_bytes, rows, cols * elem_bytes, static_cast<char*>(out),
      ld_out * elem_bytes);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("GatherRowsKernel");
  return absl::OkStatus();
}

absl::Status LaunchSpinWait(int64_t ns, cudaStream_t stream) {
  if (ns < 0) return InvalidParam("SpinWait", "ns", "must be >= 0");
  SpinWaitKernel<<<1, 1, 0, stream>>>(ns);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("SpinWaitKernel");
  return absl::OkStatus();
}

}  // namespace spar
