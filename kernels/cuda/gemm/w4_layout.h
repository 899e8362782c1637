// The device layout of 4-bit weights for the W4A16 GEMM (w4a16_gemm.h),
// written once at load time from the canonical codes of kernels/ref
// (int4 with group scales and zero points, or NVFP4 e2m1 codes with e4m3
// block scales). Pure host code, no CUDA: the repack is unit-tested on the
// CPU (tests/ref/w4_layout_test.cc).
//
// Values: the matrix is cut into 16-row x 64-column chunks, stored
// [rows/16][cols/64] x 512 bytes; in a chunk, mma lane L (g = L / 4,
// t = L % 4) owns 16 bytes = four 32-bit words, word s for mma k-step s.
// The chunk's K order is permuted so that lane t's four k-steps cover the
// contiguous columns [16t, 16t + 16) (its activations are then two 16-byte
// shared-memory loads): in k-step s the fragment's logical columns
// {2t, 2t+1} are the real columns 16t + 4s + {0, 1} and {2t+8, 2t+9} are
// 16t + 4s + {2, 3}. Within an int4 word s the nibbles are placed so that
// (word >> 4p) & 0x000F000F puts the two values of A-register p in the two
// bf16 halves (an NVFP4 word holds the same eight codes, its bits placed for
// the e2m1 -> bf16 arithmetic: nvfp4_word.h):
//   nibble 0 / 4: row g,     columns 16t+4s+0 / +1   (register a0)
//   nibble 1 / 5: row g + 8, columns 16t+4s+0 / +1   (register a1)
//   nibble 2 / 6: row g,     columns 16t+4s+2 / +3   (register a2)
//   nibble 3 / 7: row g + 8, columns 16t+4s+2 / +3   (register a3)
// Rows are padded with zeros to a multiple of 64 (the kernel's row tile).
//
// Int4 scales and zero points: fp32 and uint8, group-major [cols/group]
// [rows_padded] so a tile's rows of one group are contiguous (padding:
// scale 1, zero 0, code 0 -> exactly 0). The kernel needs group % 64 == 0.
// NVFP4 scales: e4m3 bytes [rows_padded][cols/16] (lane t of a chunk uses
// block 4 * chunk + t), plus one fp32 global scale.
//
// SiLU·mul: gate and up (same shape) are packed as one matrix whose 16-row
// blocks are [gate rows 8q..8q+7 | up rows 8q..8q+7], so one mma fragment
// holds both halves of 8 outputs (the kernel's epilogue pairs them).
#ifndef SPAR_KERNELS_CUDA_GEMM_W4_LAYOUT_H_
#define SPAR_KERNELS_CUDA_GEMM_W4_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "kernels/ref/int4_ref.h"
#include "kernels/ref/nvfp4_ref.h"

namespace spar::gemm {

inline constexpr int64_t kW4RowTile = 64;  // rows are padded to this
inline constexpr int64_t kW4Chunk = 64;    // columns per fragment chunk
inline constexpr int64_t kW4ChunkBytes = 512;

// One matrix's codes in canonical form (see kernels/ref/int4_ref.h and
// nvfp4_ref.h): codes [rows, cols]; int4: zeros and scales [rows, cols/group];
// NVFP4: e4m3 scales [rows, cols/16] and the global scale.
struct W4Source {
  int64_t rows = 0, cols = 0;
  bool fp4 = false;
  int64_t group = 0;  // int4
  const uint8_t* codes = nullptr;
  const uint8_t* zeros = nullptr;
  const float* scales = nullptr;
  const uint8_t* fp4_scales = nullptr;
  float global_scale = 1.0f;
};

// Views of kernels/ref's canonical forms (valid while `w` lives).
W4Source W4SourceOf(const ref::Int4Weights& w);
W4Source W4SourceOf(const ref::Nvfp4Weights& w);

struct W4Packed {
  int64_t rows = 0;         // logical rows (SiLU pair: 2 x the gate's)
  int64_t rows_padded = 0;  // multiple of kW4RowTile
  int64_t cols = 0;
  bool fp4 = false;
  int64_t group = 0;                // int4: columns per scale
  std::vector<uint8_t> values;      // rows_padded * cols / 2
  std::vector<float> scales;        // int4: [cols/group][rows_padded]
  std::vector<uint8_t> zeros;       // int4: [cols/group][rows_padded]
  std::vector<uint8_t> fp4_scales;  // NVFP4: [rows_padded][cols/16]
  float global_scale = 1.0f;
  float global_scale_up = 1.0f;  // NVFP4 SiLU pair: the up matrix's own
};

// True when the kernel takes this shape: cols a multiple of 64 and, for
// int4, a group that is a multiple of 64 and divides cols.
bool W4LayoutSupports(int64_t cols, int64_t group, bool fp4);

W4Packed PackW4(const W4Source& m);
// Matrices of one input width stacked along the output (a fused projection's
// parts: one GEMM writes their outputs side by side, padding only after the
// last). W4CanStack says whether two matrices can share one packing: the
// same columns and format, the same group (int4), or the same global scale
// (NVFP4: the kernel applies one per matrix).
bool W4CanStack(const W4Source& a, const W4Source& b);
W4Packed PackW4Stacked(const std::vector<W4Source>& parts);
// gate and up of the same shape, interleaved by 8 rows (SiLU·mul).
W4Packed PackW4SiluPair(const W4Source& gate, const W4Source& up);

// The inverse of the value placement, for tests: codes [rows_padded, cols].
std::vector<uint8_t> UnpackW4Codes(const W4Packed& p);

// Device bytes of one packed matrix of `rows` x `cols` (what spar plan counts).
int64_t W4PackedBytes(int64_t rows, int64_t cols, int64_t group, bool fp4);

}  // namespace spar::gemm

#endif  // SPAR_KERNELS_CUDA_GEMM_W4_LAYOUT_H_
