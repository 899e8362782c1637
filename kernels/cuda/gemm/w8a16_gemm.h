// W8A16 GEMM for sm80: Y[m, n] = X[m, k] (bf16) · W[n, k]ᵀ, fp32 accumulate,
// bf16 (or fp32) out, where W is block-FP8 exactly as GLM-5-FP8 /
// DeepSeek-V3.2 store it (e4m3 + one fp32 `weight_scale_inv` multiplier per
// 128x128 block, layout [ceil(n/128), ceil(k/128)], partial last blocks
// allowed) or plain bf16. The e4m3 -> bf16 widening is done in registers
// (sm80 has no FP8 instructions), products are exact, and each 128-column
// block scale is applied to the fp32 accumulator, so the result equals
// kernels/ref Fp8Gemm up to fp32 summation order.
//
// One launch may stream several weight matrices ("segments") that read the
// same X: their outputs are written side by side in Y (segment 0's columns
// first). This is the fused A projection: pass q_a_proj (e4m3),
// kv_a_proj_with_mqa (e4m3, 576 rows: its last scale block is half-filled),
// indexer.wk (e4m3) and indexer.weights_proj (bf16, no scale) as four
// segments of one launch; Y row = [2048 q_a | 576 kv_a | 128 wk | 32 w]. No
// concatenation or re-quantisation of the checkpoint tensors is needed
// (concatenating kv_a with the next FP8 tensor would misalign the scale
// blocks, and quantising weights_proj to FP8 is not acceptable numerically).
//
// Epilogues (applied in fp32 before the single rounding to the output type):
//   kSiluMul: exactly one segment holds the gate weight [n, k] and `up` the
//     up weight [n, k] (same type); out[:, j] = silu(x·gate_jᵀ) · (x·up_jᵀ).
//     The checkpoint's gate_proj and up_proj tensors are passed as they are;
//     if the engine stores them concatenated as one [2n, k] buffer, `up`
//     points at row n of it (and, for e4m3, at scale row n/128, which needs
//     n % 128 == 0 — true for every GLM-5 / DeepSeek-V3.2 MLP; tiled
//     weights need n % 16 == 0 for row n to start a tile).
//   residual (any epilogue): out += R[m, n_out]; R may alias Y (in place).
//
// Split-K: for small m and few output tiles the K loop is split over
// blocks; partial tiles go to `workspace` (fp32) and the last block of each
// tile sums them in a fixed order (results do not depend on scheduling).
// The workspace also holds per-tile counters (its first 64 KB, the same for
// every plan): zero the whole workspace once when allocating it; every
// launch leaves the counters at zero again, so one workspace serves every
// GEMM of a stream. It must not be used by two launches that may run
// concurrently. 32-64 MB is enough for every GLM-5 decode shape.
// With too little (or no) workspace the heuristic just splits less.
//
// Thread-safety: the functions are thread-safe; launches follow stream order.
#ifndef SPAR_KERNELS_CUDA_GEMM_W8A16_GEMM_H_
#define SPAR_KERNELS_CUDA_GEMM_W8A16_GEMM_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/gemm/gemm_config.h"
#include "kernels/cuda/gemm/w8a16_tiles.h"

namespace spar {

enum class GemmWeightType : int {
  kFp8Block128 = 0,  // e4m3 values + fp32 multiplier per 128x128 block
  kBf16 = 1,
};

// How a weight's bytes are laid out (w8a16_tiles.h). The tiled layouts cut
// the matrix into tiles of 16 rows x 64 bytes (rows padded with zeros to a
// multiple of 16), so the 16 rows an mma fragment reads per 64-byte span are
// one contiguous kilobyte (DRAM streams that faster than rows ld apart);
// kTilesAlongK orders the tiles [row block][span], kTilesAcrossRows [span]
// [row block]. Written once at load time by TileGemmRows. Every weight of
// one launch (segments and up) has the same layout.
enum class GemmWeightLayout : int {
  kRowMajor = 0,
  kTilesAlongK = 1,
  kTilesAcrossRows = 2,
};

inline bool IsTiled(GemmWeightLayout l) { return l != GemmWeightLayout::kRowMajor; }
// Whether `l` is one of the enumerators (a launch refuses any other value).
inline bool IsKnownGemmWeightLayout(GemmWeightLayout l) {
  return l == GemmWeightLayout::kRowMajor || l == GemmWeightLayout::kTilesAlongK ||
         l == GemmWeightLayout::kTilesAcrossRows;
}

// The tile order of a tiled layout (TileGemmRows' argument).
inline gemm::GemmTileOrder TileOrderOf(GemmWeightLayout l) {
  return l == GemmWeightLayout::kTilesAcrossRows ? gemm::GemmTileOrder::kAcrossRows : gemm::GemmTileOrder::kAlongK;
}

enum class GemmEpilogue : int {
  kNone = 0,
  kSiluMul = 1,
};

// One weight matrix W[n, k], base 16-byte aligned, row-major or tiled
// (`layout`). Rows are `ld` elements long (0: k): a k whose rows are not a
// whole number of the kernel's 64-byte stages (a q_lora_rank of 96, say) is
// stored zero-padded to such a row at load time (PaddedGemmRowElements), and
// the columns past k are never read from X.
struct GemmWeight {
  GemmWeightType type = GemmWeightType::kFp8Block128;
  const void* data = nullptr;    // e4m3 bytes [n, ld] or bf16 [n, ld]
  const float* scale = nullptr;  // e4m3: [ceil(n/128), ceil(k/128)]; bf16: unused
  int64_t n = 0;                 // rows = output columns of this segment
  int64_t ld = 0;                // row length in elements; 0: k
  GemmWeightLayout layout = GemmWeightLayout::kRowMajor;
};

// The row length in elements a weight of k columns is stored with: k when
// its bytes are a multiple of 64 (every real GLM-5 / DeepSeek-V3.2 shape),
// else rounded up to that with zero columns.
int64_t PaddedGemmRowElements(int64_t k, GemmWeightType type);

// The row length in elements the kernels stream for a weight of k columns:
// its ld, or k where ld is 0.
inline int64_t GemmRowElements(const GemmWeight& w, int64_t k) { return w.ld > 0 ? w.ld : k; }

struct W8A16GemmParams {
  int64_t m = 0;  // tokens; 0 is a no-op
  int64_t k = 0;  // multiple of 8; every weight's row (ld) a whole number of 64-byte stages
  const __nv_bfloat16* x = nullptr;  // [m, k], row stride ldx (multiple of 8), 16-byte aligned
  int64_t ldx = 0;

  GemmWeight segments[gemm::kMaxGemmSegments];  // output columns in this order
  int num_segments = 1;

  GemmEpilogue epilogue = GemmEpilogue::kNone;
  GemmWeight up;  // kSiluMul only: up weight, same type and n as segments[0]

  const __nv_bfloat16* residual = nullptr;  // [m, n_out] or nullptr; may equal y
  int64_t ldr = 0;

  void* y = nullptr;  // [m, n_out] bf16, or fp32 if y_fp32; row stride ldy
  int64_t ldy = 0;
  bool y_fp32 = false;

  void* workspace = nullptr;  // split-K partials + counters (zeroed once), or nullptr
  size_t workspace_bytes = 0;

  int num_sms = 0;  // 0: read from the current device

  // Tests and benchmarks only: force a tile configuration (>= 0) and split
  // factor instead of the heuristic's choice.
  int force_config = -1;
  int force_splits = 1;
  // Tests and benchmarks only, for GEMMs the streaming decode kernel takes
  // (W8A16GemmUsesStreamKernel): 0 its own plan, 1 / 2 / 4 / 8 that many
  // warps a block, -1 the tile kernel instead.
  int force_stream_warps = 0;
};

// Output columns: segments' n summed (kSiluMul: segments[0].n).
int64_t W8A16GemmOutputColumns(const W8A16GemmParams& p);

// The plan the heuristic would use for these params (shapes, epilogue,
// workspace size and num_sms are read; pointers are not).
gemm::GemmPlan W8A16GemmPlan(const W8A16GemmParams& p);

// Workspace bytes for the best split-K plan of these shapes, assuming an
// unlimited workspace (pass at least this to get the fastest plan).
size_t W8A16GemmWorkspaceBytes(const W8A16GemmParams& p);

// True if the launch runs the streaming decode kernel (gemm_config.h's
// StreamPlan): at most 32 tokens, weights whose rows hold exactly k
// columns, no forced tile configuration.
bool W8A16GemmUsesStreamKernel(const W8A16GemmParams& p);

// True if the shapes and layouts are supported (see the field comments).
bool W8A16GemmSupported(const W8A16GemmParams& p);

// Validates (InvalidArgument naming the field) and launches on `stream`.
absl::Status LaunchW8A16Gemm(const W8A16GemmParams& p, cudaStream_t stream);

}  // namespace spar

#endif  // SPAR_KERNELS_CUDA_GEMM_W8A16_GEMM_H_
