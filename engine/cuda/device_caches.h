// The paged latent and indexer-key caches of the layers a cuda backend holds,
// one buffer per layer and cache, sized by block count or by a share of the
// device's memory (--gpu-memory-utilization).
#ifndef SPAR_ENGINE_CUDA_DEVICE_CACHES_H_
#define SPAR_ENGINE_CUDA_DEVICE_CACHES_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "base/cache_layout.h"
#include "engine/backend.h"
#include "engine/cuda/device_buffer.h"

namespace spar {

class DeviceCaches {
 public:
  // Allocates and zeroes the caches of `spec` (the cpu reference formats,
  // F32, become `default_latent` / `default_indexer`). With
  // spec.memory_utilization > 0 the block count is what fits next to the
  // memory in use. `used_at_init`: device bytes in use before the first
  // weight; `memory` gets the weights' and the caches' bytes. Returns the
  // block count.
  absl::StatusOr<int64_t> Allocate(const CacheSpec& spec, LatentFormat default_latent, IndexerFormat default_indexer,
                                   int64_t used_at_init, cudaStream_t stream, DeviceMemoryUsage* memory);

  // The spec in effect: resolved formats and the block count.
  const CacheSpec& spec() const { return spec_; }
  int64_t num_slots() const { return spec_.num_blocks * kCacheBlockTokens; }
  absl::Status CheckLayer(int layer) const;
  uint8_t* latent(int layer) const { return latent_[layer].as<uint8_t>(); }
  uint8_t* indexer(int layer) const { return indexer_[layer].as<uint8_t>(); }

 private:
  CacheSpec spec_;
  std::vector<DeviceBuffer> latent_, indexer_;
};

}  // namespace spar

#endif  // SPAR_ENGINE_CUDA_DEVICE_CACHES_H_
