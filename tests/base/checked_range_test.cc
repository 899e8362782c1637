// base/checked_range.h: the range check that replaces ASan's per-access
// checks in hot loops must report what those checks would.
#include "base/checked_range.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"

#ifdef SPAR_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

namespace spar {
namespace {

TEST(CheckedRangeTest, InBoundsRangesPass) {
  std::vector<float> v(100);
  CheckReadable(v.data(), v.size() * sizeof(float));
  CheckReadable(v.data() + 99, sizeof(float));
  CheckReadable(v.data(), 0);
}

#ifdef SPAR_ASAN
// The dying child reports to stderr, where EXPECT_DEATH looks, even when
// tools/sanitize.sh sends reports to files (log_path).
TEST(CheckedRangeDeathTest, OnePastTheEndIsAHeapBufferOverflow) {
  auto v = std::make_unique<float[]>(100);
  EXPECT_DEATH(
      {
        __sanitizer_set_report_path("stderr");
        CheckReadable(v.get() + 1, 100 * sizeof(float));
      },
      "heap-buffer-overflow");
}

TEST(CheckedRangeDeathTest, FreedMemoryIsAHeapUseAfterFree) {
  float* freed = new float[100];
  delete[] freed;
  EXPECT_DEATH(
      {
        __sanitizer_set_report_path("stderr");
        CheckReadable(freed + 10, 8 * sizeof(float));
      },
      "heap-use-after-free");
}
#else
TEST(CheckedRangeDeathTest, ReportsOnlyUnderAddressSanitizer) {
  GTEST_SKIP() << "CheckReadable is a no-op outside ASan builds (tools/sanitize.sh runs these)";
}
#endif

}  // namespace
}  // namespace spar
