// Host-side builders shared by the W8A16 GEMM and MoE GPU tests: random
// block-FP8 / bf16 weights with their dequantised fp32 twins, bf16
// activations, router logits, and the fp32 reference product.
#ifndef SPAR_TESTS_KERNELS_GEMM_GEMM_TEST_UTIL_H_
#define SPAR_TESTS_KERNELS_GEMM_GEMM_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/numeric.h"
#include "base/rng.h"
#include "kernels/cuda/gemm/w8a16_gemm.h"
#include "kernels/cuda/gemm/w8a16_tiles.h"
#include "kernels/ref/fp8_block_ref.h"
#include "kernels/ref/gemm_ref.h"
#include "tests/kernels/gpu_test_util.h"

namespace spar::testing {

// A weight [n, k] as the kernel reads it plus its exact fp32 value.
struct HostWeight {
  GemmWeightType type = GemmWeightType::kFp8Block128;
  int64_t n = 0, k = 0;
  std::vector<uint8_t> bytes;  // e4m3 [n, k] or bf16 [n, k] (little-endian)
  std::vector<float> scale;    // e4m3: [ceil(n/128), ceil(k/128)]
  std::vector<float> deq;      // [n, k] fp32 (what the reference multiplies)
};

// Random weights whose 128x128 blocks differ in magnitude by up to 2^±6,
// so the per-block scales (and the kernel's accumulator rescaling) matter.
// exact = true: e4m3 values are small integers and scales powers of two
// (every product and partial sum of a small-integer X is exact in fp32).
inline HostWeight MakeWeight(GemmWeightType type, int64_t n, int64_t k, uint64_t seed, bool exact = false) {
  HostWeight w;
  w.type = type;
  w.n = n;
  w.k = k;
  Rng rng(seed);
  const int64_t br = (n + 127) / 128, bc = (k + 127) / 128;
  std::vector<float> block_mag(br * bc);
  for (auto& m : block_mag) m = std::ldexp(1.0f, static_cast<int>(rng.Below(13)) - 6);
  if (type == GemmWeightType::kBf16) {
    w.bytes.resize(n * k * 2);
    w.deq.resize(n * k);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < k; ++j) {
        const float v = exact ? static_cast<float>(static_cast<int>(rng.Below(9)) - 4)
                              : rng.Symmetric() * block_mag[(i / 128) * bc + j / 128];
        const uint16_t h = FloatToBf16(v);
        w.bytes[2 * (i * k + j)] = static_cast<uint8_t>(h & 0xff);
        w.bytes[2 * (i * k + j) + 1] = static_cast<uint8_t>(h >> 8);
        w.deq[i * k + j] = Bf16ToFloat(h);
      }
    }
    return w;
  }
  if (exact) {
    w.bytes.resize(n * k);
    w.scale.resize(br * bc);
    for (int64_t b = 0; b < br * bc; ++b) w.scale[b] = std::ldexp(1.0f, static_cast<int>(rng.Below(5)) - 2);
    for (auto& v : w.bytes) v = FloatToE4m3(static_cast<float>(static_cast<int>(rng.Below(9)) - 4));
  } else {
    std::vector<float> dense(n * k);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < k; ++j) dense[i * k + j] = rng.Symmetric() * block_mag[(i / 128) * bc + j / 128];
    }
    Fp8BlockWeight q = QuantizeFp8Blocks(dense.data(), n, k, /*ue8m0=*/false);
    w.bytes = std::move(q.values);
    w.scale = std::move(q.scales);
  }
  w.deq.resize(n * k);
  DequantizeFp8Blocks(w.bytes.data(), w.scale.data(), n, k, 128, w.deq.data());
  return w;
}

// Device copy of a HostWeight, rows PaddedGemmRowElements(k) long as the
// engine stores them (the padding zero), row-major or tiled (`layout`, set
// before Upload; w8a16_tiles.h).
struct DeviceWeight {
  DeviceArray<uint8_t> bytes;
  DeviceArray<float> scale;
  GemmWeightLayout layout = GemmWeightLayout::kRowMajor;
  GemmWeight View(const HostWeight& h) const {
    GemmWeight g;
    g.type = h.type;
    g.data = bytes.get();
    g.scale = h.type == GemmWeightType::kFp8Block128 ? scale.get() : nullptr;
    g.n = h.n;
    g.ld = PaddedGemmRowElements(h.k, h.type);
    g.layout = layout;
    return g;
  }
  void Upload(const HostWeight& h) {
    const int64_t elem = h.type == GemmWeightType::kBf16 ? 2 : 1;
    const int64_t ld = PaddedGemmRowElements(h.k, h.type);
    std::vector<uint8_t> padded(static_cast<size_t>(h.n * ld * elem), 0);
    for (int64_t r = 0; r < h.n; ++r) {
      std::memcpy(padded.data() + r * ld * elem, h.bytes.data() + r * h.k * elem, h.k * elem);
    }
    bytes.Upload(IsTiled(layout) ? gemm::TileGemmRows(padded.data(), h.n, ld * elem, TileOrderOf(layout)) : padded);
    if (!h.scale.empty()) scale.Upload(h.scale);
  }
};

// bf16-representable activations (exact: small integers).
inline std::vector<float> MakeActivations(int64_t rows, int64_t cols, uint64_t seed, bool exact = false) {
  Rng rng(seed);
  std::vector<float> x(rows * cols);
  for (auto& v : x) v = exact ? static_cast<float>(static_cast<int>(rng.Below(5)) - 2) : RoundToBf16(rng.Symmetric());
  return x;
}

// y[m, n] = x[m, k] · w[n, k]ᵀ in fp32 (kernels/ref).
inline std::vector<float> RefGemm(const std::vector<float>& x, int64_t m, int64_t k, const std::vector<float>& w,
                                  int64_t n) {
  std::vector<float> y(m * n);
  if (m > 0) ref::Gemm(x.data(), k, m, k, w.data(), n, y.data(), n);
  return y;
}

// Router logits [tokens, experts]: uniform in [-scale, scale).
inline std::vector<float> RandomLogits(int64_t tokens, int experts, uint64_t seed, float scale = 3.0f) {
  Rng rng(seed);
  std::vector<float> v(tokens * experts);
  for (auto& x : v) x = rng.Symmetric() * scale;
  return v;
}

inline double MaxAbs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

}  // namespace spar::testing

#endif  // SPAR_TESTS_KERNELS_GEMM_GEMM_TEST_UTIL_H_
