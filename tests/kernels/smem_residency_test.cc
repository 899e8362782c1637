// Shared-memory residency emulation (kernels/cuda/common/smem_residency.h):
// the padding arithmetic, on the figures of the GPUs spar is built for (A100)
// and tested on (H100 / H200). Host only.
#include "kernels/cuda/common/smem_residency.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace spar {
namespace {

constexpr SmemFigures kHopper{233472, 1024, 232448};  // H100 / H200: 228 KB an SM, 227 KB a block
constexpr int64_t kA100 = 167936;                      // 164 KB an SM

int64_t Fit(int64_t per_sm, int64_t bytes) { return per_sm / (bytes + 1024); }

// Every W8A16 tile configuration's shared memory (gemm_config.h) and a few
// more: padded, as many blocks fit a Hopper SM as fit an A100 SM unpadded.
TEST(SmemResidency, PaddedLaunchesFitAsManyBlocksAsOnAnA100) {
  for (const int64_t bytes : {30784, 41040, 49232, 65584, 73808, 82064, 98368, 122936, 147520, 160000}) {
    const int64_t padded = SmemForResidency(bytes, kHopper, kA100);
    ASSERT_GE(padded, bytes) << bytes;
    EXPECT_EQ(padded % 16, 0) << bytes;
    EXPECT_EQ(Fit(kHopper.per_sm, padded), Fit(kA100, bytes)) << bytes << " padded to " << padded;
    EXPECT_LE(padded, kHopper.max_per_block);
  }
  // The prefill MoE's T64R4W2F tile: two blocks on Hopper, one on an A100.
  EXPECT_EQ(Fit(kHopper.per_sm, 98368), 2);
  EXPECT_EQ(Fit(kA100, 98368), 1);
  EXPECT_EQ(SmemForResidency(98368, kHopper, kA100), 115728);
}

TEST(SmemResidency, OffOrNotSmallerLeavesTheRequest) {
  EXPECT_EQ(SmemForResidency(98368, kHopper, 0), 98368);
  EXPECT_EQ(SmemForResidency(98368, kHopper, -5), 98368);
  EXPECT_EQ(SmemForResidency(98368, kHopper, kHopper.per_sm), 98368);
  const SmemFigures a100{kA100, 1024, 166912};
  EXPECT_EQ(SmemForResidency(98368, a100, kA100), 98368);
}

// A block that would not fit the emulated SM at all is refused (the launch
// fails there too), not shrunk.
TEST(SmemResidency, ABlockTooBigForTheEmulatedSmIsRefused) {
  EXPECT_EQ(SmemForResidency(170000, kHopper, kA100), -1);
  // One block on both (120 KB): nothing to pad.
  EXPECT_EQ(SmemForResidency(120000, kHopper, kA100), 120000);
}

}  // namespace
}  // namespace spar
