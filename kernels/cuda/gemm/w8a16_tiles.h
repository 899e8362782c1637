// The tiled device layouts of W8A16 GEMM weights (GemmWeightLayout::
// kTilesAlongK / kTilesAcrossRows in w8a16_gemm.h), written once at load
// time. Pure host code, no CUDA: the repack is unit-tested on the CPU
// (tests/ref/w8a16_tiles_test.cc).
//
// Why: the kernels read a weight row 64 bytes at a time (one mma span: 64
// e4m3 or 32 bf16 columns), 16 rows at once (one mma fragment). Row-major,
// those 16 pieces lie a whole row apart, and DRAM serves such a strided
// pattern at ~85 % of its copy bandwidth against 97 % for a contiguous
// stream (bench/results/gemm.md, "Probes", H200 running sm80 code). Tiled,
// the 16 pieces a fragment needs are one contiguous kilobyte.
//
// Layout: rows padded with zero rows to a multiple of 16; the matrix cut
// into tiles of 16 rows x 64 bytes, each tile row-major (1 KB). The tiles
// are ordered either
//   along K     [row block][span]: a row block's spans follow each other,
//               so a warp streaming its rows along K reads one range;
//   across rows [span][row block]: the row blocks of one span follow each
//               other, so blocks working on neighbouring rows at the same K
//               read neighbouring kilobytes (tile kernels, whose blocks all
//               start at K = 0, spread over every DRAM channel).
// Byte (r, c) of a row of row_bytes bytes (a multiple of 64) lies in tile
//   along K:     (r / 16) * (row_bytes / 64) + c / 64
//   across rows: (c / 64) * (padded rows / 16) + r / 16
// at (r % 16) * 64 + c % 64. FP8 block scales keep their own layout.
#ifndef SPAR_KERNELS_CUDA_GEMM_W8A16_TILES_H_
#define SPAR_KERNELS_CUDA_GEMM_W8A16_TILES_H_

#include <cstdint>
#include <vector>

namespace spar::gemm {

inline constexpr int64_t kGemmTileRows = 16;
inline constexpr int64_t kGemmTileRowBytes = 64;
inline constexpr int64_t kGemmTileBytes = kGemmTileRows * kGemmTileRowBytes;

enum class GemmTileOrder : int {
  kAlongK = 0,      // [row block][span]
  kAcrossRows = 1,  // [span][row block]
};

// Rows a tiled matrix of `rows` rows stores (zero rows after the last).
inline int64_t GemmTiledRows(int64_t rows) { return (rows + kGemmTileRows - 1) / kGemmTileRows * kGemmTileRows; }

// Bytes of a tiled matrix.
inline int64_t GemmTiledBytes(int64_t rows, int64_t row_bytes) { return GemmTiledRows(rows) * row_bytes; }

// Where byte (r, c) of the row-major matrix of `rows` rows lives in the tiled one.
inline int64_t GemmTiledOffset(int64_t r, int64_t c, int64_t rows, int64_t row_bytes, GemmTileOrder order) {
  const int64_t tile = order == GemmTileOrder::kAlongK
                           ? (r / kGemmTileRows) * (row_bytes / kGemmTileRowBytes) + c / kGemmTileRowBytes
                           : (c / kGemmTileRowBytes) * (GemmTiledRows(rows) / kGemmTileRows) + r / kGemmTileRows;
  return tile * kGemmTileBytes + (r % kGemmTileRows) * kGemmTileRowBytes + c % kGemmTileRowBytes;
}

// A row-major matrix of `rows` rows of `row_bytes` bytes (a positive multiple
// of 64; the caller checks) in a tiled layout (GemmTiledBytes bytes).
std::vector<uint8_t> TileGemmRows(const uint8_t* row_major, int64_t rows, int64_t row_bytes, GemmTileOrder order);
// The same written to `out` (GemmTiledBytes bytes, padding rows zeroed): a
// loader packing many matrices into one buffer (the experts of a layer)
// tiles each in place instead of copying a tiled temporary.
void TileGemmRowsInto(const uint8_t* row_major, int64_t rows, int64_t row_bytes, GemmTileOrder order, uint8_t* out);

// The inverse, for tests: [GemmTiledRows(rows)][row_bytes] row-major, the
// padding rows included.
std::vector<uint8_t> UntileGemmRows(const std::vector<uint8_t>& tiled, int64_t rows, int64_t row_bytes,
                                    GemmTileOrder order);

}  // namespace spar::gemm

#endif  // SPAR_KERNELS_CUDA_GEMM_W8A16_TILES_H_
