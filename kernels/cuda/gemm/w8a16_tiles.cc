#include "kernels/cuda/gemm/w8a16_tiles.h"

#include <cstring>

namespace spar::gemm {

std::vector<uint8_t> TileGemmRows(const uint8_t* row_major, int64_t rows, int64_t row_bytes, GemmTileOrder order) {
  std::vector<uint8_t> out(static_cast<size_t>(GemmTiledBytes(rows, row_bytes)), 0);
  // Each 64-byte piece of a row moves whole; the padding rows stay zero.
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = row_major + r * row_bytes;
    for (int64_t c = 0; c < row_bytes; c += kGemmTileRowBytes) {
      std::memcpy(out.data() + GemmTiledOffset(r, c, rows, row_bytes, order), src + c, kGemmTileRowBytes);
    }
  }
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
