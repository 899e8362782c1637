// Internal to kernels/cuda/gemm: the parameter block of the W4A16 kernels
// (the tile kernel and the decode kernel take the same one), filled by the
// host launchers in w4a16_gemm.cu. Not a public API.
#ifndef SPAR_KERNELS_CUDA_GEMM_W4A16_KERNEL_PARAMS_H_
#define SPAR_KERNELS_CUDA_GEMM_W4A16_KERNEL_PARAMS_H_

#include <cstdint>

namespace spar::gemm::w4 {

struct KernelParams {
  int64_t m = 0, k = 0;
  const uint16_t* x = nullptr;
  int64_t ldx = 0;
  const int32_t* x_row_index = nullptr;
  const uint8_t* values = nullptr;
  const float* scales = nullptr;
  const uint8_t* zeros = nullptr;
  const uint8_t* fp4_scales = nullptr;
  const float* global_scale = nullptr;
  int64_t n = 0;  // outputs
  int64_t rows_padded = 0;
  int64_t group = 0;
  int32_t silu = 0;
  void* y = nullptr;
  int64_t ldy = 0;
  int32_t y_fp32 = 0;
  int32_t splits = 1;
  int32_t row_tiles = 0;  // row blocks of the grid (blockIdx.y)
  float* partials = nullptr;
  int32_t* counters = nullptr;
  const int32_t* work = nullptr;  // grouped: {expert, first row, rows, 0}
  const int32_t* work_count = nullptr;
  int64_t values_stride = 0, scales_stride = 0, zeros_stride = 0, fp4_stride = 0;
};

}  // namespace spar::gemm::w4

#endif  // SPAR_KERNELS_CUDA_GEMM_W4A16_KERNEL_PARAMS_H_
