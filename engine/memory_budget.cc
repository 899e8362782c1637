#include "engine/memory_budget.h"

#include "engine/step_plan.h"

namespace spar {

size_t CacheBlockBytesPerLayer(LatentFormat latent, IndexerFormat indexer) {
  return static_cast<size_t>(kCacheBlockTokens) * LatentRowBytes(latent) + IndexerPageBytes(indexer);
}

int64_t ActivationReserveBytes(int64_t max_positions) {
  return (int64_t{2} << 30) + kReservedPrefillChunk * 4 * max_positions;
}

}  // namespace spar
