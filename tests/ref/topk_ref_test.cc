#include "kernels/ref/topk_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "base/rng.h"
#include "gtest/gtest.h"

namespace spar::ref {
namespace {

TEST(TopKRefTest, MatchesFullSortOnRandomRows) {
  Rng rng(11);
  for (int iter = 0; iter < 200; ++iter) {
    const int len = 1 + static_cast<int>(rng.Below(500));
    const int k = 1 + static_cast<int>(rng.Below(64));
    std::vector<float> v(len);
    // Coarse values force many ties.
    for (auto& x : v) x = std::floor(rng.Symmetric() * 8);
    std::vector<int32_t> out(k);
    TopK(v.data(), len, k, out.data());
    std::vector<int32_t> order(len);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return v[a] > v[b]; });
    std::vector<int32_t> want(order.begin(), order.begin() + std::min(k, len));
    std::sort(want.begin(), want.end());
    want.resize(k, -1);
    EXPECT_EQ(out, want);
  }
}

TEST(TopKRefTest, NeverPicksNegativeInfinityOrNaN) {
  const float ninf = -std::numeric_limits<float>::infinity();
  std::vector<float> v = {ninf, 1.0f, NAN, ninf, -5.0f};
  std::vector<int32_t> out(4);
  TopK(v.data(), 5, 4, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{1, 4, -1, -1}));
  std::vector<float> all(100, ninf);
  std::vector<int32_t> none(8);
  TopK(all.data(), 100, 8, none.data());
  EXPECT_EQ(none, std::vector<int32_t>(8, -1));
}

TEST(TopKRefTest, ShortRowsSelectEverything) {
  std::vector<float> v = {3, 1, 2};
  std::vector<int32_t> out(5);
  TopK(v.data(), 3, 5, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{0, 1, 2, -1, -1}));
}

}  // namespace
}  // namespace spar::ref
