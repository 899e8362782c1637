// The element-wise glue kernels of small_ops.h against host-computed
// expectations on fresh random inputs, outputs poisoned first.
#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "base/numeric.h"
#include "base/rng.h"
#include "gtest/gtest.h"
#include "kernels/cuda/small_ops/small_ops.h"
#include "tests/kernels/gpu_test_util.h"

namespace spar {
namespace {

using testing::AsBf16;
using testing::DeviceArray;
using testing::RandomFloats;
using testing::ToBf16;

TEST(AddBf16, MatchesRoundedFp32SumAndLeavesPaddingAlone) {
  SPAR_REQUIRE_GPU();
  struct Case {
    int64_t rows, cols, acc_pad, x_pad;
  };
  // Odd pads: the one-element path; pads of 8 (16-byte rows): the 8-wide
  // path, one decode row and more rows than one grid dimension holds.
  for (const Case k : {Case{1, 1, 5, 3}, {3, 257, 5, 3}, {37, 6144, 5, 3}, {1, 6144, 8, 0}, {5, 2056, 0, 8},
                       {70001, 16, 8, 8}}) {
    const int64_t rows = k.rows, cols = k.cols;
    const int64_t ld_acc = cols + k.acc_pad, ldx = cols + k.x_pad;  // padded rows: the pads must stay untouched
    const auto acc_f = RandomFloats(rows * ld_acc, 11 + rows, -4, 4);
    const auto x_f = RandomFloats(rows * ldx, 12 + cols, -4, 4);
    const auto acc_h = ToBf16(acc_f), x_h = ToBf16(x_f);
    DeviceArray<uint16_t> acc, x;
    acc.Upload(acc_h);
    x.Upload(x_h);
    ASSERT_TRUE(LaunchAddBf16(AsBf16(acc.get()), ld_acc, AsBf16(x.get()), ldx, rows, cols, nullptr).ok());
    SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
    const auto got = acc.Download();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < ld_acc; ++c) {
        const uint16_t want = c < cols ? FloatToBf16(Bf16ToFloat(acc_h[r * ld_acc + c]) + Bf16ToFloat(x_h[r * ldx + c]))
                                       : acc_h[r * ld_acc + c];
        ASSERT_EQ(got[r * ld_acc + c], want) << rows << "x" << cols << " at " << r << "," << c;
      }
    }
  }
}

TEST(CastF32ToBf16, RoundsToNearestEven) {
  SPAR_REQUIRE_GPU();
  for (const int64_t n : {int64_t{1}, int64_t{1000}, int64_t{2'000'003}}) {  // > 4096 blocks x 256: grid-stride
    auto x_h = RandomFloats(n, 21 + n, -1e4f, 1e4f);
    if (n > 2) x_h[1] = -0.0f;
    DeviceArray<float> x;
    x.Upload(x_h);
    DeviceArray<uint16_t> out(n);
    out.Poison();
    ASSERT_TRUE(LaunchCastF32ToBf16(x.get(), n, AsBf16(out.get()), nullptr).ok());
    SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
    const auto got = out.Download();
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], FloatToBf16(x_h[i])) << "n " << n << " at " << i;
  }
}

TEST(GatherRows, CopiesTheNamedRowsForBothElementSizes) {
  SPAR_REQUIRE_GPU();
  Rng rng(31);
  for (const int elem : {2, 4}) {
    const int64_t src_rows = 50, cols = 77, ldx = 80, ld_out = 79, num_rows = 23;
    std::vector<uint8_t> x_h(src_rows * ldx * elem);
    for (auto& b : x_h) b = static_cast<uint8_t>(rng.NextU64());
    std::vector<int32_t> rows_h(num_rows);
    for (auto& r : rows_h) r = static_cast<int32_t>(rng.Below(src_rows));  // repeats allowed
    DeviceArray<uint8_t> x;
    x.Upload(x_h);
    DeviceArray<int32_t> rows;
    rows.Upload(rows_h);
    DeviceArray<uint8_t> out(num_rows * ld_out * elem);
    out.Poison();
    ASSERT_TRUE(LaunchGatherRows(x.get(), ldx, rows.get(), num_rows, cols, elem, out.get(), ld_out, nullptr).ok());
    SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
    const auto got = out.Download();
    for (int64_t i = 0; i < num_rows; ++i) {
      ASSERT_EQ(std::memcmp(got.data() + i * ld_out * elem, x_h.data() + rows_h[i] * ldx * elem, cols * elem), 0)
          << "elem " << elem << " row " << i;
      for (int64_t b = cols * elem; b < ld_out * elem; ++b) ASSERT_EQ(got[i * ld_out * elem + b], 0xFF) << "pad written";
    }
  }
}

TEST(SpinWait, KeepsTheStreamBusyForAboutTheGivenTime) {
  SPAR_REQUIRE_GPU();
  cudaEvent_t start, end;
  SPAR_ASSERT_CUDA(cudaEventCreate(&start));
  SPAR_ASSERT_CUDA(cudaEventCreate(&end));
  SPAR_ASSERT_CUDA(cudaEventRecord(start));
  ASSERT_TRUE(LaunchSpinWait(3'000'000, nullptr).ok());
  SPAR_ASSERT_CUDA(cudaEventRecord(end));
  SPAR_ASSERT_CUDA(cudaEventSynchronize(end));
  float ms = 0;
  SPAR_ASSERT_CUDA(cudaEventElapsedTime(&ms, start, end));
  EXPECT_GE(ms, 2.9f);  // never shorter; longer only by the timer's ~1 us steps and scheduling
  EXPECT_LT(ms, 100.0f);
  cudaEventDestroy(start);
  cudaEventDestroy(end);
}

TEST(Elementwise, RejectsBadParams) {
  SPAR_REQUIRE_GPU();
  DeviceArray<uint16_t> buf(64);
  EXPECT_EQ(LaunchAddBf16(AsBf16(buf.get()), 4, AsBf16(buf.get()), 8, 2, 8, nullptr).code(),
            absl::StatusCode::kInvalidArgument);  // ld_acc < cols
  EXPECT_EQ(LaunchAddBf16(nullptr, 8, AsBf16(buf.get()), 8, 2, 8, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchCastF32ToBf16(nullptr, 4, AsBf16(buf.get()), nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchCastF32ToBf16(nullptr, -1, nullptr, nullptr).code(), absl::StatusCode::kInvalidArgument);
  const absl::Status s = LaunchGatherRows(buf.get(), 8, nullptr, 1, 8, 3, buf.get(), 8, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("elem_bytes"), absl::string_view::npos) << s;
  EXPECT_EQ(LaunchSpinWait(-1, nullptr).code(), absl::StatusCode::kInvalidArgument);
  // Empty shapes are no-ops, whatever the pointers.
  EXPECT_TRUE(LaunchAddBf16(nullptr, 0, nullptr, 0, 0, 8, nullptr).ok());
  EXPECT_TRUE(LaunchGatherRows(nullptr, 0, nullptr, 0, 8, 2, nullptr, 0, nullptr).ok());
}

}  // namespace
}  // namespace spar
