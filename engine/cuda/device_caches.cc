#include "engine/cuda/device_caches.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/memory_budget.h"
#include "kernels/cuda/attention/mla_cache.h"
#include "kernels/cuda/common/cuda_status.h"

namespace spar {
namespace {

// Blocks that fit in utilization × device memory next to what is in use.
absl::StatusOr<int64_t> BlocksForBudget(const CacheSpec& spec, size_t bytes_per_block, cudaStream_t stream) {
  if (spec.memory_utilization > 1) {
    return absl::InvalidArgumentError(absl::StrCat("gpu memory utilization ", spec.memory_utilization, " is above 1"));
  }
  SPAR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  size_t free_bytes = 0, total = 0;
  SPAR_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total));
  const double used = static_cast<double>(total - free_bytes);
  const double budget = spec.memory_utilization * static_cast<double>(total) - used -
                        static_cast<double>(spec.activation_reserve_bytes);
  const int64_t blocks = budget > 0 ? static_cast<int64_t>(budget / static_cast<double>(bytes_per_block)) : 0;
  if (blocks < 1) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "no room for the KV cache: ", spec.memory_utilization, " x ", total >> 20, " MiB allowed, ", used / (1 << 20),
        " MiB in use (weights, other processes), ", spec.activation_reserve_bytes >> 20,
        " MiB kept for activations; raise --gpu-memory-utilization or hold fewer layers per GPU"));
  }
  return blocks;
}

}  // namespace

absl::StatusOr<int64_t> DeviceCaches::Allocate(const CacheSpec& spec, LatentFormat default_latent,
                                               IndexerFormat default_indexer, int64_t used_at_init,
                                               cudaStream_t stream, DeviceMemoryUsage* memory) {
  spec_ = spec;
  // The cpu reference formats (F32) have no GPU kernels: use the cuda defaults.
  if (spec_.latent_format == LatentFormat::kF32) spec_.latent_format = default_latent;
  if (spec_.indexer_format == IndexerFormat::kF32) spec_.indexer_format = default_indexer;
  if (!MlaCacheWriteSupported(spec_.latent_format)) return absl::InvalidArgumentError("latent cache format unsupported");
  latent_.clear();
  indexer_.clear();
  const size_t block_bytes_per_layer = CacheBlockBytesPerLayer(spec_.latent_format, spec_.indexer_format);
  {
    SPAR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    size_t free_bytes = 0, total = 0;
    SPAR_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total));
    memory->weights_bytes = std::max<int64_t>(0, static_cast<int64_t>(total - free_bytes) - used_at_init);
  }
  if (spec.memory_utilization > 0) {
    SPAR_ASSIGN_OR_RETURN(spec_.num_blocks, BlocksForBudget(spec, block_bytes_per_layer * spec.num_layers, stream));
  }
  memory->cache_bytes = static_cast<int64_t>(block_bytes_per_layer * spec.num_layers * spec_.num_blocks);
  if (spec_.num_blocks < 1) return absl::InvalidArgumentError("cache needs at least one block");
  latent_.resize(spec.num_layers);
  indexer_.resize(spec.num_layers);
  const size_t latent_bytes = static_cast<size_t>(num_slots()) * LatentRowBytes(spec_.latent_format);
  const size_t indexer_bytes = static_cast<size_t>(spec_.num_blocks) * IndexerPageBytes(spec_.indexer_format);
  for (int l = 0; l < spec.num_layers; ++l) {
    SPAR_RETURN_IF_ERROR(latent_[l].Allocate(latent_bytes));
    SPAR_RETURN_IF_ERROR(indexer_[l].Allocate(indexer_bytes));
    SPAR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(latent_[l].as<void>(), 0, latent_bytes, stream));
    SPAR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(indexer_[l].as<void>(), 0, indexer_bytes, stream));
  }
  SPAR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return spec_.num_blocks;
}

absl::Status DeviceCaches::CheckLayer(int layer) const {
  if (layer < 0 || layer >= spec_.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("layer ", layer, " has no cache"));
  }
  return absl::OkStatus();
}

}  // namespace spar
