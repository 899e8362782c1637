#include "engine/decode_graph_key.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace spar {

std::string DecodeGraphKey::DebugString() const {
  return absl::StrCat("tokens ", tokens, tokens_per_seq > 1 ? absl::StrCat(" (", tokens_per_seq, " per sequence)") : "",
                      ", logit rows ", logit_rows, ", table width ", table_stride,
                      select_all ? ", all keys selected" : "", has_input ? ", stage input" : "",
                      variant != 0 ? absl::StrCat(", variant ", variant) : "");
}

std::optional<DecodeGraphKey> DecodeGraphKeyFor(const StepPlan& plan, bool has_input, int64_t indexer_topk,
                                                const GraphShapeLimits& limits, int variant) {
  if (plan.seqs.empty()) return std::nullopt;
  const int64_t n = static_cast<int64_t>(plan.seqs[0].tokens.size());
  if (n < 1 || n > limits.max_tokens_per_seq) return std::nullopt;
  // More rows than the paged decode indexer takes: the gathered (prefill)
  // path, whose host-side offsets a graph cannot replay.
  if (limits.indexer_heads > 0 && n * limits.indexer_heads > kMaxPagedQueryRows) return std::nullopt;
  if (static_cast<int64_t>(plan.seqs.size()) * n > limits.max_tokens) return std::nullopt;
  DecodeGraphKey key;
  int64_t width = 1, max_context = 0;
  for (const auto& s : plan.seqs) {
    if (static_cast<int64_t>(s.tokens.size()) != n) return std::nullopt;
    width = std::max<int64_t>(width, static_cast<int64_t>(s.block_table.size()));
    max_context = std::max<int64_t>(max_context, s.start_pos + n);
  }
  key.tokens = static_cast<int64_t>(plan.seqs.size()) * n;
  key.tokens_per_seq = n;
  key.logit_rows = static_cast<int64_t>(plan.logit_rows.size());
  key.table_stride = 1;
  while (key.table_stride < width) key.table_stride *= 2;
  key.select_all = indexer_topk > 0 && max_context <= indexer_topk;
  key.has_input = has_input;
  key.variant = variant;
  return key;
}

}  // namespace spar
