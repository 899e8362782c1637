// The W8A16 weights' tiled layouts (kernels/cuda/gemm/w8a16_tiles.h) on the
// CPU: every byte lands at the offset the kernels compute (both tile
// orders), a fragment's 16 rows of one 64-byte span are one contiguous
// kilobyte, the inverse recovers the matrix, the padding rows are zero and
// tiling in place writes the same bytes.
#include "kernels/cuda/gemm/w8a16_tiles.h"

#include <cstdint>
#include <vector>

#include "base/rng.h"
#include "gtest/gtest.h"

namespace spar::gemm {
namespace {

std::vector<uint8_t> RandomBytes(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint8_t> v(static_cast<size_t>(n));
  for (auto& b : v) b = static_cast<uint8_t>(rng.Below(256));
  return v;
}

// The kernels' address of byte (r, c): w8a16_gemm_kernel.cuh's copy slots
// and w8a16_stream.cu's RowStart plus span steps.
int64_t KernelOffset(int64_t r, int64_t c, int64_t rows, int64_t row_bytes, GemmTileOrder order) {
  const int64_t spans = row_bytes / 64, row_blocks = (rows + 15) / 16;
  const int64_t tile = order == GemmTileOrder::kAlongK ? (r >> 4) * spans + (c >> 6) : (c >> 6) * row_blocks + (r >> 4);
  return tile * 1024 + (r & 15) * 64 + (c & 63);
}

TEST(GemmTiles, EveryByteLandsWhereTheKernelsReadIt) {
  for (const GemmTileOrder order : {GemmTileOrder::kAlongK, GemmTileOrder::kAcrossRows}) {
    // Row counts below, at and past a tile; rows of one span and of many.
    for (const int64_t rows : {1, 15, 16, 17, 33, 96}) {
      for (const int64_t row_bytes : {64, 128, 576, 6144}) {
        const auto src = RandomBytes(rows * row_bytes, static_cast<uint64_t>(rows * 7919 + row_bytes));
        const auto tiled = TileGemmRows(src.data(), rows, row_bytes, order);
        ASSERT_EQ(static_cast<int64_t>(tiled.size()), GemmTiledRows(rows) * row_bytes);
        ASSERT_EQ(GemmTiledRows(rows) % 16, 0);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < row_bytes; ++c) {
            const int64_t kernel = KernelOffset(r, c, rows, row_bytes, order);
            ASSERT_EQ(GemmTiledOffset(r, c, rows, row_bytes, order), kernel);
            ASSERT_EQ(tiled[kernel], src[r * row_bytes + c]) << "row " << r << " byte " << c;
          }
        }
        for (int64_t r = rows; r < GemmTiledRows(rows); ++r) {
          for (int64_t c = 0; c < row_bytes; ++c) {
            ASSERT_EQ(tiled[KernelOffset(r, c, rows, row_bytes, order)], 0) << "padding row " << r;
          }
        }
        const auto back = UntileGemmRows(tiled, rows, row_bytes, order);
        ASSERT_EQ(std::vector<uint8_t>(back.begin(), back.begin() + rows * row_bytes), src);
      }
    }
  }
}

// In place (a packed buffer of several matrices, not zeroed): the same bytes
// as TileGemmRows, padding rows zeroed, nothing written past the matrix.
TEST(GemmTiles, InPlaceEqualsTheReturnedCopy) {
  for (const GemmTileOrder order : {GemmTileOrder::kAlongK, GemmTileOrder::kAcrossRows}) {
    for (const int64_t rows : {5, 16, 40}) {
      const int64_t row_bytes = 192, bytes = GemmTiledBytes(rows, row_bytes);
      const auto src = RandomBytes(rows * row_bytes, static_cast<uint64_t>(rows + 31));
      std::vector<uint8_t> buffer(static_cast<size_t>(bytes + 64), 0xA5);  // poison
      TileGemmRowsInto(src.data(), rows, row_bytes, order, buffer.data());
      const auto want = TileGemmRows(src.data(), rows, row_bytes, order);
      EXPECT_EQ(std::vector<uint8_t>(buffer.begin(), buffer.begin() + bytes), want) << rows << " rows";
      for (int64_t i = bytes; i < bytes + 64; ++i) ASSERT_EQ(buffer[i], 0xA5) << "byte " << i << " past the matrix";
    }
  }
}

TEST(GemmTiles, AFragmentsSpanIsOneContiguousKilobyte) {
  const int64_t rows = 48, row_bytes = 512;
  const auto src = RandomBytes(rows * row_bytes, 5);
  for (const GemmTileOrder order : {GemmTileOrder::kAlongK, GemmTileOrder::kAcrossRows}) {
    const auto tiled = TileGemmRows(src.data(), rows, row_bytes, order);
    // Row block 1, span 3: rows 16..31, bytes 192..255 of each, in row order.
    const int64_t base = order == GemmTileOrder::kAlongK ? (1 * (row_bytes / 64) + 3) * 1024 : (3 * 3 + 1) * 1024;
    for (int64_t i = 0; i < 16; ++i) {
      for (int64_t c = 0; c < 64; ++c) EXPECT_EQ(tiled[base + i * 64 + c], src[(16 + i) * row_bytes + 192 + c]);
    }
  }
  // Along K the next span of the same rows follows; across rows the next row block.
  EXPECT_EQ(GemmTiledOffset(16, 256, rows, row_bytes, GemmTileOrder::kAlongK),
            GemmTiledOffset(16, 192, rows, row_bytes, GemmTileOrder::kAlongK) + 1024);
  EXPECT_EQ(GemmTiledOffset(32, 192, rows, row_bytes, GemmTileOrder::kAcrossRows),
            GemmTiledOffset(16, 192, rows, row_bytes, GemmTileOrder::kAcrossRows) + 1024);
}

}  // namespace
}  // namespace spar::gemm
