#include "services/worker/activation_codec.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/numeric.h"

namespace spar {

size_t EncodeActivation(const Activations& in, v1::Activation* out) {
  out->set_rows(in.rows);
  out->set_cols(in.cols);
  std::string* data = out->mutable_data();
  // One pass: bf16 halves as long as every value is a bf16 widened to fp32
  // (its low 16 bits zero; a NaN with payload bits there is not); the first
  // value that is not turns the whole message into F32.
  data->resize(in.data.size() * 2);
  char* p = data->data();
  bool bf16 = true;
  for (float f : in.data) {
    const uint32_t bits = FloatBits(f);
    if (bits & 0xffffu) {
      bf16 = false;
      break;
    }
    const uint16_t h = static_cast<uint16_t>(bits >> 16);
    std::memcpy(p, &h, 2);
    p += 2;
  }
  if (bf16) {
    out->set_dtype(v1::ACTIVATION_DTYPE_BF16);
  } else {
    out->set_dtype(v1::ACTIVATION_DTYPE_F32);
    data->resize(in.data.size() * 4);
    std::memcpy(data->data(), in.data.data(), data->size());
  }
  return data->size();
}

absl::Status DecodeActivation(const v1::Activation& in, Activations* out) {
  int64_t elem = 0;
  switch (in.dtype()) {
    case v1::ACTIVATION_DTYPE_F32:
      elem = 4;
      break;
    case v1::ACTIVATION_DTYPE_BF16:
      elem = 2;
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
  out->data.resize(static_cast<size_t>(in.rows() * in.cols()));
  const char* p = in.data().data();
  if (elem == 4) {
    if (!out->data.empty()) std::memcpy(out->data.data(), p, in.data().size());
  } else {
    for (float& f : out->data) {
      uint16_t h;
      std::memcpy(&h, p, 2);
      f = Bf16ToFloat(h);
      p += 2;
    }
  }
  return absl::OkStatus();
}

}  // namespace spar
