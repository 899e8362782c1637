// A check that holds in every build type (assert() vanishes under NDEBUG):
// a fuzz target states the properties its code promises, and a violation
// aborts with the property named so libFuzzer keeps the input.
#ifndef SPAR_FUZZ_FUZZ_CHECK_H_
#define SPAR_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define SPAR_FUZZ_CHECK(cond)                                                             \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "%s:%d: fuzz property violated: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

#endif  // SPAR_FUZZ_FUZZ_CHECK_H_
