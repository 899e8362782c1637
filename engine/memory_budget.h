// How a GPU stage's memory divides: the sizes the engine allocates by and
// `spar plan` predicts with, kept in one place so the two cannot drift.
#ifndef SPAR_ENGINE_MEMORY_BUDGET_H_
#define SPAR_ENGINE_MEMORY_BUDGET_H_

#include <cstddef>
#include <cstdint>

#include "base/cache_layout.h"

namespace spar {

// Device bytes one 64-token cache block takes in one layer: its latent rows
// and its indexer key page (every layer holds both).
size_t CacheBlockBytesPerLayer(LatentFormat latent, IndexerFormat indexer);

// What a GPU stage keeps free for one step's activations next to its weights
// and caches: a fixed 2 GiB plus the fp32 prefill indexer logits of one
// 4096-token chunk over `max_positions` (the served context).
int64_t ActivationReserveBytes(int64_t max_positions);

// Tokens per prefill chunk the reserve is sized for.
inline constexpr int64_t kReservedPrefillChunk = 4096;

}  // namespace spar

#endif  // SPAR_ENGINE_MEMORY_BUDGET_H_
