// The one shape of a launcher's bad-parameter error: "Op: field why", so a
// caller (and a test) can tell which parameter of which kernel was refused.
#ifndef SPAR_KERNELS_CUDA_COMMON_INVALID_ARG_H_
#define SPAR_KERNELS_CUDA_COMMON_INVALID_ARG_H_

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace spar {

inline absl::Status InvalidParam(absl::string_view op, absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", field, " ", why));
}

}  // namespace spar

#endif  // SPAR_KERNELS_CUDA_COMMON_INVALID_ARG_H_
