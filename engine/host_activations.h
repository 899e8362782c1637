// Hidden states on the host, in the dtype the backend computed them in: what
// crosses a pipeline hop (and a stage leader's hand-off to its
// tensor-parallel peers). The cuda backend's bf16 activations stay bf16 end
// to end (half the bytes of fp32, no conversion on either side); the cpu
// backend's are fp32.
#ifndef SPAR_ENGINE_HOST_ACTIVATIONS_H_
#define SPAR_ENGINE_HOST_ACTIVATIONS_H_

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/dtype.h"
#include "base/numeric.h"

namespace spar {

struct HostActivations {
  DType dtype = DType::kF32;  // kF32 or kBF16
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> bytes;  // rows * cols values, rows packed

  // fp32 rows (the cpu backend's; tests).
  static HostActivations FromFloats(const std::vector<float>& values, int64_t rows, int64_t cols) {
    HostActivations a;
    a.rows = rows;
    a.cols = cols;
    a.bytes.resize(values.size() * 4);
    if (!values.empty()) std::memcpy(a.bytes.data(), values.data(), a.bytes.size());
    return a;
  }
  // The values as fp32 (exact for both dtypes).
  std::vector<float> ToFloats() const {
    std::vector<float> out(static_cast<size_t>(rows * cols));
    if (dtype == DType::kF32) {
      if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * 4);
    } else {
      for (size_t i = 0; i < out.size(); ++i) {
        uint16_t h;
        std::memcpy(&h, bytes.data() + 2 * i, 2);
        out[i] = Bf16ToFloat(h);
      }
    }
    return out;
  }
  // A known dtype and exactly rows * cols values.
  absl::Status Check() const {
    if (dtype != DType::kF32 && dtype != DType::kBF16) {
      return absl::InvalidArgumentError("host activations must be F32 or BF16");
    }
    if (rows < 0 || cols < 0 || static_cast<int64_t>(bytes.size()) != rows * cols * static_cast<int64_t>(DTypeSize(dtype))) {
      return absl::InvalidArgumentError(absl::StrCat("host activations hold ", bytes.size(), " bytes, not ", rows,
                                                     " x ", cols, " values of ", DTypeSize(dtype), " bytes"));
    }
    return absl::OkStatus();
  }
};

}  // namespace spar

#endif  // SPAR_ENGINE_HOST_ACTIVATIONS_H_
