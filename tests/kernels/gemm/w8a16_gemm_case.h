// One W8A16 GEMM launch checked against kernels/ref (the GPU tests of the
// tile and streaming kernels share it): a case's weights, epilogue and
// forced plan; RunAndCheck uploads them, launches, and compares every output
// with the fp32 reference (exact cases bit for bit), with one spare row and
// 8 spare columns that must stay poisoned.
#ifndef SPAR_TESTS_KERNELS_GEMM_W8A16_GEMM_CASE_H_
#define SPAR_TESTS_KERNELS_GEMM_W8A16_GEMM_CASE_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda/gemm/w8a16_gemm.h"
#include "tests/kernels/gemm/gemm_test_util.h"

namespace spar::testing {

inline constexpr GemmWeightType kFp8 = GemmWeightType::kFp8Block128;
inline constexpr GemmWeightType kBf16 = GemmWeightType::kBf16;
inline constexpr size_t kWorkspaceBytes = size_t{64} << 20;

struct GemmCase {
  int64_t m = 1;
  int64_t k = 128;
  std::vector<const HostWeight*> segments;
  const HostWeight* up = nullptr;  // SiLU·mul when set
  bool residual = false;           // in place: y starts as R
  bool y_fp32 = false;
  bool exact = false;
  int force_config = -1;
  int force_splits = 1;
  int force_stream_warps = 0;  // W8A16GemmParams::force_stream_warps
  GemmWeightLayout layout = GemmWeightLayout::kRowMajor;  // every weight's
  uint64_t seed = 1;
};

std::string Describe(const GemmCase& c);

// Runs one case on the GPU and checks it against kernels/ref. `got_out`:
// the output.
void RunAndCheck(const GemmCase& c, cudaStream_t stream = nullptr, std::vector<float>* got_out = nullptr);

}  // namespace spar::testing

#endif  // SPAR_TESTS_KERNELS_GEMM_W8A16_GEMM_CASE_H_
