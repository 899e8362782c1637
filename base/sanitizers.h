// Whether this translation unit is built with AddressSanitizer
// (tools/sanitize.sh): SPAR_ASAN for the preprocessor, kAsanBuild for code.
// Tests use it to leave out promises that hold for optimized builds only
// (throughput, resident memory: ASan's quarantine keeps freed memory).
#ifndef SPAR_BASE_SANITIZERS_H_
#define SPAR_BASE_SANITIZERS_H_

#if defined(__SANITIZE_ADDRESS__)  // gcc
#define SPAR_ASAN 1
#elif defined(__has_feature)  // clang
#if __has_feature(address_sanitizer)
#define SPAR_ASAN 1
#endif
#endif

namespace spar {

#ifdef SPAR_ASAN
inline constexpr bool kAsanBuild = true;
#else
inline constexpr bool kAsanBuild = false;
#endif

}  // namespace spar

#endif  // SPAR_BASE_SANITIZERS_H_
