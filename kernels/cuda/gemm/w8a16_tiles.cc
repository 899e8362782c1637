#include "kernels/cuda/gemm/w8a16_tiles.h"

#include <cstring>

namespace spar::gemm {

void TileGemmRowsInto(const uint8_t* row_major, int64_t rows, int64_t row_bytes, GemmTileOrder order, uint8_t* out) {
  // Each 64-byte piece of a row moves whole; the padding rows are zeroed.
  const int64_t padded = GemmTiledRows(rows);
  for (int64_t r = 0; r < padded; ++r) {
    for (int64_t c = 0; c < row_bytes; c += kGemmTileRowBytes) {
      uint8_t* dst = out + GemmTiledOffset(r, c, rows, row_bytes, order);
      if (r < rows) {
        std::memcpy(dst, row_major + r * row_bytes + c, kGemmTileRowBytes);
      } else {
        std::memset(dst, 0, kGemmTileRowBytes);
      }
    }
  }
}

std::vector<uint8_t> TileGemmRows(const uint8_t* row_major, int64_t rows, int64_t row_bytes, GemmTileOrder order) {
  std::vector<uint8_t> out(static_cast<size_t>(GemmTiledBytes(rows, row_bytes)));
  TileGemmRowsInto(row_major, rows, row_bytes, order, out.data());
  return out;
}

std::vector<uint8_t> UntileGemmRows(const std::vector<uint8_t>& tiled, int64_t rows, int64_t row_bytes,
                                    GemmTileOrder order) {
  const int64_t padded = GemmTiledRows(rows);
  std::vector<uint8_t> out(static_cast<size_t>(padded * row_bytes));
  for (int64_t r = 0; r < padded; ++r) {
    for (int64_t c = 0; c < row_bytes; c += kGemmTileRowBytes) {
      std::memcpy(out.data() + r * row_bytes + c, tiled.data() + GemmTiledOffset(r, c, rows, row_bytes, order),
                  kGemmTileRowBytes);
    }
  }
  return out;
}

}  // namespace spar::gemm
