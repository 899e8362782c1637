#include "services/worker/activation_codec.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/numeric.h"

namespace spar {
namespace {

// fp32 values that are all exactly bf16 (the low 16 bits zero; a NaN with
// payload bits there is not) as their bf16 halves; false at the first one
// that is not.
bool NarrowToBf16(const std::vector<uint8_t>& f32, std::string* out) {
  const size_t n = f32.size() / 4;
  out->resize(n * 2);
  char* p = out->data();
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, f32.data() + 4 * i, 4);
    if (bits & 0xffffu) return false;
    const uint16_t h = static_cast<uint16_t>(bits >> 16);
    std::memcpy(p + 2 * i, &h, 2);
  }
  return true;
}

}  // namespace

size_t EncodeActivation(const Activations& in, v1::Activation* out) {
  out->set_rows(in.rows);
  out->set_cols(in.cols);
  std::string* data = out->mutable_data();
  if (in.dtype == DType::kBF16 || NarrowToBf16(in.bytes, data)) {
    out->set_dtype(v1::ACTIVATION_DTYPE_BF16);
    if (in.dtype == DType::kBF16) data->assign(reinterpret_cast<const char*>(in.bytes.data()), in.bytes.size());
  } else {
    out->set_dtype(v1::ACTIVATION_DTYPE_F32);
    data->assign(reinterpret_cast<const char*>(in.bytes.data()), in.bytes.size());
  }
  return data->size();
}

absl::Status DecodeActivation(const v1::Activation& in, Activations* out) {
  int64_t elem = 0;
  switch (in.dtype()) {
    case v1::ACTIVATION_DTYPE_F32:
      elem = 4;
      out->dtype = DType::kF32;
      break;
    case v1::ACTIVATION_DTYPE_BF16:
      elem = 2;
      out->dtype = DType::kBF16;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("hidden.dtype ", v1::ActivationDType_Name(in.dtype()),
                                                     " is not supported (F32 or BF16)"));
  }
  // Bounds first, so rows * cols cannot overflow on a hostile message.
  constexpr int64_t kMaxDim = int64_t{1} << 24;
  if (in.rows() < 0 || in.cols() < 0 || in.rows() > kMaxDim || in.cols() > kMaxDim ||
      in.rows() * in.cols() * elem != static_cast<int64_t>(in.data().size())) {
    return absl::InvalidArgumentError(absl::StrCat("hidden has ", in.data().size(), " bytes, not ", in.rows(), " x ",
                                                   in.cols(), " ", v1::ActivationDType_Name(in.dtype()), " values"));
  }
  out->rows = in.rows();
  out->cols = in.cols();
  out->bytes.assign(in.data().begin(), in.data().end());
  return absl::OkStatus();
}

}  // namespace spar
