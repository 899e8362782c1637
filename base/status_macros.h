// Status propagation helpers. Debian 12's Abseil (20220623) has no
// absl/status/status_macros.h, so spar carries its own two macros.
#ifndef SPAR_BASE_STATUS_MACROS_H_
#define SPAR_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define SPAR_STATUS_CONCAT_INNER_(a, b) a##b
#define SPAR_STATUS_CONCAT_(a, b) SPAR_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` yields a non-OK status.
#define SPAR_RETURN_IF_ERROR(expr)                   \
  do {                                               \
    ::absl::Status spar_status_ = (expr);            \
    if (!spar_status_.ok()) return spar_status_;     \
  } while (0)

// `SPAR_ASSIGN_OR_RETURN(auto x, MakeX());` declares x from an OK StatusOr or
// returns its status.
#define SPAR_ASSIGN_OR_RETURN(lhs, expr) \
  SPAR_ASSIGN_OR_RETURN_IMPL_(SPAR_STATUS_CONCAT_(spar_statusor_, __LINE__), lhs, expr)

#define SPAR_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                \
  if (!statusor.ok()) return statusor.status();          \
  lhs = std::move(statusor).value()

#endif  // SPAR_BASE_STATUS_MACROS_H_
