#include "base/thread_pool.h"

#include <atomic>
#include <vector>

#include "gtest/gtest.h"

namespace spar {
namespace {

TEST(ThreadPoolTest, CoversEveryIndexOnce) {
  for (int64_t n : {0, 1, 7, 1000, 12345}) {
    std::vector<std::atomic<int>> hits(n);
    ParallelFor(n, 3, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i]++;
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  }
}

TEST(ThreadPoolTest, NestedCallsRunInline) {
  std::atomic<int64_t> total{0};
  ParallelFor(8, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      ParallelFor(100, 1, [&](int64_t b2, int64_t e2) { total += e2 - b2; });
    }
  });
  EXPECT_EQ(total.load(), 800);
}

}  // namespace
}  // namespace spar
