// Host-side helpers for GPU kernel tests: skip cleanly without a GPU, RAII
// device buffers, poisoned outputs, random inputs, error metrics.
#ifndef SPAR_TESTS_KERNELS_GPU_TEST_UTIL_H_
#define SPAR_TESTS_KERNELS_GPU_TEST_UTIL_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "base/numeric.h"
#include "base/rng.h"
#include "gtest/gtest.h"

namespace spar::testing {

// True when a CUDA device of compute capability >= 8.0 is present.
inline bool HasSm80Gpu() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    return false;
  }
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return false;
  return prop.major >= 8;
}

// First statement of every GPU test: reported as SKIPPED by ctest (the gpu
// label sets SKIP_REGULAR_EXPRESSION) when there is no usable GPU.
#define SPAR_REQUIRE_GPU()                                       \
  do {                                                           \
    if (!::spar::testing::HasSm80Gpu()) GTEST_SKIP() << "no sm80+ GPU"; \
  } while (0)

#define SPAR_ASSERT_CUDA(expr)                                                          \
  do {                                                                                  \
    cudaError_t e_ = (expr);                                                            \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_);              \
  } while (0)

// A device allocation of n elements of T; freed on destruction.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n = 0) { Resize(n); }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  void Resize(size_t n) {
    cudaFree(ptr_);
    ptr_ = nullptr;
    n_ = n;
    if (n > 0) {
      EXPECT_EQ(cudaMalloc(&ptr_, n * sizeof(T)), cudaSuccess);
    }
  }
  T* get() const { return ptr_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }

  void Upload(const std::vector<T>& host) {
    if (host.size() != n_) Resize(host.size());
    EXPECT_EQ(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<T> Download() const {
    std::vector<T> host(n_);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr_, bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
  // Fills every byte with 0xFF: NaN in fp32/bf16, -1 in ints, so unwritten
  // outputs cannot pass as results.
  void Poison() { EXPECT_EQ(cudaMemset(ptr_, 0xFF, bytes()), cudaSuccess); }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

inline std::vector<float> RandomFloats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = lo + (hi - lo) * rng.Uniform();
  return v;
}

// bf16 device buffers are held as uint16_t bit patterns; the kernels' params
// take __nv_bfloat16.
inline const __nv_bfloat16* AsBf16(const uint16_t* p) { return reinterpret_cast<const __nv_bfloat16*>(p); }
inline __nv_bfloat16* AsBf16(uint16_t* p) { return reinterpret_cast<__nv_bfloat16*>(p); }

inline std::vector<uint16_t> ToBf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = FloatToBf16(v[i]);
  return out;
}

inline std::vector<float> FromBf16(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Bf16ToFloat(v[i]);
  return out;
}

// ||a - b|| / ||b||; NaN anywhere gives +inf.
inline double RelativeL2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) && !(std::isinf(a[i]) && a[i] == b[i])) return INFINITY;
    if (std::isinf(b[i])) continue;
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

inline double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    if (a[i] == b[i]) continue;
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return m;
}

}  // namespace spar::testing

#endif  // SPAR_TESTS_KERNELS_GPU_TEST_UTIL_H_
