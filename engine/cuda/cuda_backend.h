// The cuda backend: the engine's op interface on the sm80 kernels of
// kernels/cuda, bf16 activations with fp32 accumulation, weights kept as
// they are stored (block-FP8 or bf16), paged latent (bf16 or FP8 656 B) and
// indexer (FP8 132 B or bf16) caches on the GPU.
#ifndef SPAR_ENGINE_CUDA_CUDA_BACKEND_H_
#define SPAR_ENGINE_CUDA_CUDA_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/backend.h"
#include "kernels/cuda/gemm/w8a16_gemm.h"  // GemmWeightLayout

namespace spar {

struct CudaBackendOptions {
  int device = 0;
  // Cache formats used when the model asks for the cpu defaults (F32).
  LatentFormat latent_format = LatentFormat::kBF16;
  IndexerFormat indexer_format = IndexerFormat::kFp8;
  // Positions the RoPE tables cover (0: max_position_embeddings).
  int64_t max_positions = 0;
  // Tensor parallel: this process is rank tp.rank of tp.size, one GPU each;
  // the ranks join an NCCL communicator from the unique id rank 0 made
  // (NewNcclUniqueId) and handed to the others.
  TpRank tp;
  std::string nccl_unique_id;
  // How long forming the group may wait for the other ranks (a peer that
  // died while loading would otherwise leave the rest waiting forever).
  absl::Duration collective_init_timeout = absl::Minutes(5);
  // Decode steps (one new token per sequence) are captured once per shape
  // (batch size, logit rows, block-table width rounded up to a power of two)
  // as CUDA graphs and replayed: one launch instead of a few hundred, so a
  // small batch is not bound by the host's kernel-launch rate.
  bool cuda_graphs = true;
  // At most this many graphs are kept (least recently used ones go).
  int max_cuda_graphs = 128;
  // Under tensor parallelism every this-many-th replayable decode step runs
  // eagerly instead: all-reduces inside a graph cannot be timed with events,
  // so these steps sample the all-reduce durations the metrics report.
  int collective_sample_period = 64;
  // The side stream of a layer's two branches at the device's highest
  // priority, with the MoE's routed experts moved onto it (the attention's
  // side branch, the indexer's selection, is already the latency-bound one),
  // and decode graphs instantiated to keep their kernel nodes' priorities:
  // when the other branch's weight-streaming GEMMs free SMs, the urgent
  // branch's pending CTAs get them first (on an H100 the one-token routing
  // launch waited 26 us beside the shared expert for an 8 us job; with it
  // the batch-1 GLM-5 layer went 0.227 -> 0.218 ms on an H200).
  bool urgent_branch_priority = true;
  // How the W8A16 GEMMs' FP8 / bf16 weights are stored: row-major or in
  // 16-row x 64-byte tiles (kernels/cuda/gemm/w8a16_tiles.h), where a
  // fragment's 16 rows of a span are one contiguous kilobyte. Same
  // arithmetic, the same bits. The MoE router stays row-major. Tiles across
  // rows: the one-token GEMMs at 93-96 % of copy instead of ~86 % (H100,
  // 12288x6144 and o_proj), the decode step 1.5-3 % faster, prefill chunks
  // 2.3 % slower (bench/RESULTS.md, session 34).
  GemmWeightLayout gemm_weight_layout = GemmWeightLayout::kTilesAcrossRows;
};

// A fresh NCCL unique id (opaque bytes) for a tensor-parallel group.
absl::StatusOr<std::string> NewNcclUniqueId();

// Fails with a clear error when no GPU is visible or its compute capability
// is below 8.0 (the sm80 kernels need Ampere or newer).
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& options);

}  // namespace spar

#endif  // SPAR_ENGINE_CUDA_CUDA_BACKEND_H_
