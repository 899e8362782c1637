// FP8 latent rows widened once per prefill step (issue 22).
//
// The sparse MLA kernel widens FP8 rows (kFp8Ds: 512 e4m3 codes, 4 fp32
// scales, 64 bf16 RoPE lanes) in registers for every (token, head group)
// that selects them. In decode a row is selected by one token, so that is the
// cheapest way to read it; in a prefill chunk every token selects up to 2048
// rows of the same context, each row is widened hundreds of times, and at 64
// heads the FP8 kernel runs ~1.5x the bf16 kernel's time (bench/results/
// attention.md). Widening the step's context rows once into a bf16 scratch
// (block by block, through the block tables) and giving the bf16 kernel index
// lists that point into the scratch costs one pass over the context instead.
//
// Numerics: widened value = bf16_rn(e4m3 * scale) (fp32 product), the rounding
// FlashMLA's FP8 path makes; sparse_mla_gpu_test bounds it against the exact
// FP8 reference. The RoPE lanes are copied.
#ifndef SPAR_KERNELS_CUDA_ATTENTION_LATENT_WIDEN_H_
#define SPAR_KERNELS_CUDA_ATTENTION_LATENT_WIDEN_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace spar {

// Whether a step's sparse MLA should read widened rows: FP8 rows, enough
// heads that the FP8 kernel is slower than the bf16 one (wide head tiles;
// the narrow 8/16-head FP8 tiles beat bf16 rows), each widened row selected
// by at least kMinWidenReuse index entries on average, and a scratch within
// kMaxWidenBytes (beyond it the FP8 kernel runs: the activation reserve of
// engine/memory_budget.h is not sized for more). Pure.
inline constexpr int kMinWidenHeads = 32;
inline constexpr int64_t kMinWidenReuse = 4;
inline constexpr int64_t kMaxWidenBytes = int64_t{512} << 20;
bool ShouldWidenLatentRows(bool fp8_rows, int64_t tokens, int heads, int list_len, int64_t context_blocks);

// Scratch bytes of `blocks` widened 64-row blocks (bf16 rows of 576).
size_t WidenedLatentBytes(int64_t blocks);

struct LatentWidenParams {
  // The FP8 pool: slot s at cache + s * 656; num_slots a multiple of 64.
  const uint8_t* cache = nullptr;
  int64_t num_slots = 0;
  // Block tables [num_seqs, block_table_stride]; sequence s's first
  // seq_block_base[s + 1] - seq_block_base[s] entries are widened into
  // scratch blocks seq_block_base[s] onwards (seq_block_base: device,
  // num_seqs + 1 ascending entries, the last = the scratch's blocks).
  const int32_t* block_table = nullptr;
  int64_t block_table_stride = 0;
  int64_t num_seqs = 0;
  const int32_t* seq_block_base = nullptr;
  int64_t max_seq_blocks = 0;  // the longest sequence's widened blocks
  // Outputs: widened rows [scratch blocks * 64, 576] bf16; block_map
  // [num_slots / 64]: pool block -> its scratch block, written for the
  // widened blocks only (a block two sequences share gets either copy).
  __nv_bfloat16* widened = nullptr;
  int32_t* block_map = nullptr;
};

absl::Status LaunchWidenLatentBlocks(const LatentWidenParams& p, cudaStream_t stream);

// out[t * out_stride + j] = the scratch row of slot indices[t * in_stride + j]
// (block_map[slot / 64] * 64 + slot % 64), or -1 where the slot is < 0 or
// >= num_slots or its block's map entry is negative (the kernel skips those
// entries as it skips them in the pool). A caller that fills the map with -1
// before the widening drops, instead of misreading, any slot outside the
// widened blocks (the engine's lists never name one).
struct SlotRemapParams {
  const int32_t* indices = nullptr;
  int64_t tokens = 0;
  int list_len = 0;
  int64_t in_stride = 0;
  const int32_t* block_map = nullptr;
  int64_t num_slots = 0;
  int32_t* out = nullptr;
  int64_t out_stride = 0;
};

absl::Status LaunchRemapSlots(const SlotRemapParams& p, cudaStream_t stream);

}  // namespace spar

#endif  // SPAR_KERNELS_CUDA_ATTENTION_LATENT_WIDEN_H_
