// The dense index lists of short contexts as cache slots (indexer.h, section 7)
// against a host computation on random block tables, outputs poisoned first.
#include <cstdint>
#include <vector>

#include "base/cache_layout.h"
#include "base/rng.h"
#include "gtest/gtest.h"
#include "kernels/cuda/indexer/indexer.h"
#include "tests/kernels/gpu_test_util.h"

namespace spar {
namespace {

using testing::DeviceArray;

struct SlotCase {
  int64_t seqs, tokens, stride;
  int k;
  std::vector<int32_t> token_seq, tables, kv_len;
};

// Random tables over distinct blocks; token t belongs to a random sequence
// and sees kv_len[t] in [1, stride * 64] positions.
SlotCase MakeCase(uint64_t seed, int64_t seqs, int64_t tokens, int64_t stride, int k) {
  Rng rng(seed);
  SlotCase c{seqs, tokens, stride, k, {}, {}, {}};
  for (int64_t i = 0; i < seqs * stride; ++i) c.tables.push_back(static_cast<int32_t>(1000 + 3 * i + rng.Below(3)));
  for (int64_t t = 0; t < tokens; ++t) {
    c.token_seq.push_back(static_cast<int32_t>(rng.Below(seqs)));
    c.kv_len.push_back(static_cast<int32_t>(1 + rng.Below(stride * kCacheBlockTokens)));
  }
  return c;
}

int32_t SlotOf(const SlotCase& c, int64_t t, int32_t p) {
  return c.tables[c.token_seq[t] * c.stride + p / kCacheBlockTokens] * kCacheBlockTokens + p % kCacheBlockTokens;
}

TEST(DenseSlots, ListsEveryVisiblePositionAscendingThenEmpty) {
  SPAR_REQUIRE_GPU();
  for (const auto& c : {MakeCase(4, 1, 1, 1, 64), MakeCase(5, 3, 17, 32, 2048), MakeCase(6, 8, 70, 2, 100)}) {
    DeviceArray<int32_t> d_idx(c.tokens * c.k), d_seq, d_tab, d_len;
    d_idx.Poison();
    d_seq.Upload(c.token_seq);
    d_tab.Upload(c.tables);
    d_len.Upload(c.kv_len);
    ASSERT_TRUE(
        LaunchDenseSlots(d_idx.get(), c.tokens, c.k, d_len.get(), d_seq.get(), d_tab.get(), c.stride, nullptr).ok());
    SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
    const auto got = d_idx.Download();
    for (int64_t t = 0; t < c.tokens; ++t) {
      for (int j = 0; j < c.k; ++j) {
        ASSERT_EQ(got[t * c.k + j], j < c.kv_len[t] ? SlotOf(c, t, j) : -1) << "token " << t << " entry " << j;
      }
    }
  }
}

TEST(Slots, RejectBadParams) {
  SPAR_REQUIRE_GPU();
  DeviceArray<int32_t> buf(16);
  EXPECT_EQ(LaunchDenseSlots(buf.get(), 1, 4, nullptr, buf.get(), buf.get(), 1, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchDenseSlots(buf.get(), -1, 4, buf.get(), buf.get(), buf.get(), 1, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(LaunchDenseSlots(nullptr, 0, 4, nullptr, nullptr, nullptr, 0, nullptr).ok());
}

}  // namespace
}  // namespace spar
