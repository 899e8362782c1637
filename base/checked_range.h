// Hot inner loops checked once per range instead of once per access under
// AddressSanitizer.
//
// ASan checks every load, which keeps a loop from vectorizing: the model's
// dot products ran ~10x slower than Release in the sanitizer pass
// (tools/sanitize.sh), enough to make the multi-process tests miss their
// deadlines. A loop that reads exactly [p, p + bytes) can instead check that
// whole range up front with CheckReadable and run unchecked
// (SPAR_UNCHECKED_LOOP on the function holding the loop). The check finds the same bugs (a read out of
// bounds, or of freed memory) and ASan's report names the allocation hit.
// Outside ASan builds both are no-ops.
#ifndef SPAR_BASE_CHECKED_RANGE_H_
#define SPAR_BASE_CHECKED_RANGE_H_

#include <cstddef>

#include "base/sanitizers.h"

#ifdef SPAR_ASAN
#include <sanitizer/asan_interface.h>
// Also no UBSan: the only arithmetic such a loop does is its index, which
// the range check covers.
#define SPAR_UNCHECKED_LOOP __attribute__((no_sanitize("address", "undefined")))
#else
#define SPAR_UNCHECKED_LOOP
#endif

namespace spar {

// Under ASan: reports an error unless every byte of [p, p + bytes) is
// addressable (allocated, in bounds, not freed).
inline void CheckReadable(const void* p, size_t bytes) {
#ifdef SPAR_ASAN
  if (const void* bad = __asan_region_is_poisoned(const_cast<void*>(p), bytes)) {
    // An instrumented read of the first bad byte: ASan reports it as the
    // overflow or use-after-free it is, with the allocation's stack.
    (void)*static_cast<const volatile char*>(bad);
  }
#else
  (void)p;
  (void)bytes;
#endif
}

}  // namespace spar

#endif  // SPAR_BASE_CHECKED_RANGE_H_
