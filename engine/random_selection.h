// The random-selection control for DSA: instead of the lightning indexer's
// top-k, a query attends to a uniformly random set of index_topk of its
// causal positions. A model whose long-context answers survive this was
// not using the indexer; one that fails it (while passing with the real
// top-k) shows that the sparse path carries the information.
#ifndef SPAR_ENGINE_RANDOM_SELECTION_H_
#define SPAR_ENGINE_RANDOM_SELECTION_H_

#include <cstdint>

namespace spar {

// Writes min(topk, ctx) distinct positions of [0, ctx), ascending, then -1
// up to topk entries. The set depends only on (seed, layer, position, ctx),
// so it is the same whatever the batch, chunking or step order.
void RandomCausalSelection(uint64_t seed, int layer, int32_t position, int32_t ctx, int topk, int32_t* out);

}  // namespace spar

#endif  // SPAR_ENGINE_RANDOM_SELECTION_H_
