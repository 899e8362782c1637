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
//
// Speculative decoding's verify steps (and the MTP layer's steps over them)
// bring n = 1 + drafts tokens for every sequence: they are replayed like
// decode steps when every sequence brings the same n, n is at most the
// caller's max_tokens_per_seq and the indexer's paged decode kernel takes n
// query rows per sequence (n x indexer heads <= 256); the key holds n and
// which of the model's op sequences (graph variant) the step is.
#ifndef SPAR_ENGINE_DECODE_GRAPH_KEY_H_
#define SPAR_ENGINE_DECODE_GRAPH_KEY_H_

#include <compare>
#include <cstdint>
#include <optional>
#include <string>

#include "engine/step_plan.h"

namespace spar {

// The paged decode indexer kernel's query rows per sequence (next_n x heads).
inline constexpr int64_t kMaxPagedQueryRows = 256;

struct DecodeGraphKey {
  int64_t tokens = 0;          // = sequences x tokens_per_seq
  int64_t tokens_per_seq = 1;  // 1: decode; 1 + drafts: a verify step
  int64_t logit_rows = 0;
  int64_t table_stride = 0;  // blocks per block-table row, a power of two
  bool select_all = false;   // every context <= the indexer's top-k
  bool has_input = false;    // a later stage: hidden states come in
  int variant = 0;           // Backend::StepOptions::graph_variant
  auto operator<=>(const DecodeGraphKey&) const = default;
  // Tokens the indexer's grids cover: table_stride whole blocks.
  int64_t max_context() const { return table_stride * kCacheBlockTokens; }
  std::string DebugString() const;
};

// What a step may be replayed as, besides its plan.
struct GraphShapeLimits {
  int64_t max_tokens = 512;        // rows of the step
  int64_t max_tokens_per_seq = 1;  // > 1: verify steps (speculative decoding)
  int64_t indexer_heads = 0;       // 0: no bound from the indexer
};

// The key of a finalized plan, or nothing when it cannot be replayed: a
// prefill chunk or a mixed step (sequences with different token counts, or
// more than limits.max_tokens_per_seq), an empty step, or a step above
// limits.max_tokens rows. `indexer_topk` 0: no indexer.
std::optional<DecodeGraphKey> DecodeGraphKeyFor(const StepPlan& plan, bool has_input, int64_t indexer_topk,
                                                const GraphShapeLimits& limits, int variant = 0);
// Decode steps only (one token per sequence), of at most max_tokens rows.
inline std::optional<DecodeGraphKey> DecodeGraphKeyFor(const StepPlan& plan, bool has_input, int64_t indexer_topk,
                                                       int64_t max_tokens) {
  return DecodeGraphKeyFor(plan, has_input, indexer_topk, GraphShapeLimits{max_tokens, 1, 0});
}

}  // namespace spar

#endif  // SPAR_ENGINE_DECODE_GRAPH_KEY_H_
