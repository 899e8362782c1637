// Which steps a GPU backend may capture as CUDA graphs, and under which key
// a captured step can be replayed for a later plan. Pure policy, no CUDA:
// the cuda backend asks it, CI tests it.
//
// A graph bakes in every host-side number its kernels were launched with:
// token and sequence counts, the logit rows, the block-table width and the
// context length the indexer's grids cover. So a key holds the step's shape
// with the table width rounded up to a power of two (a graph serves every
// context up to that width: kernels stop at each row's own length), and
// whether every context fits in the indexer's top-k (then all keys are
// selected without scoring: another op sequence).
#ifndef SPAR_ENGINE_DECODE_GRAPH_KEY_H_
#define SPAR_ENGINE_DECODE_GRAPH_KEY_H_

#include <compare>
#include <cstdint>
#include <optional>
#include <string>

#include "engine/step_plan.h"

namespace spar {

struct DecodeGraphKey {
  int64_t tokens = 0;        // = sequences: one new token each
  int64_t logit_rows = 0;
  int64_t table_stride = 0;  // blocks per block-table row, a power of two
  bool select_all = false;   // every context <= the indexer's top-k
  bool has_input = false;    // a later stage: hidden states come in
  auto operator<=>(const DecodeGraphKey&) const = default;
  // Tokens the indexer's grids cover: table_stride whole blocks.
  int64_t max_context() const { return table_stride * kCacheBlockTokens; }
  std::string DebugString() const;
};

// The key of a finalized plan, or nothing when it cannot be replayed: a
// prefill chunk or a mixed step (more than one token for some sequence), an
// empty step, or a batch above `max_tokens`. `indexer_topk` 0: no indexer.
std::optional<DecodeGraphKey> DecodeGraphKeyFor(const StepPlan& plan, bool has_input, int64_t indexer_topk,
                                                int64_t max_tokens);

}  // namespace spar

#endif  // SPAR_ENGINE_DECODE_GRAPH_KEY_H_
