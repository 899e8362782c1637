#include "engine/decode_graph_key.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace spar {

std::string DecodeGraphKey::DebugString() const {
  return absl::StrCat("tokens ", tokens, ", logit rows ", logit_rows, ", table width ", table_stride,
                      select_all ? ", all keys selected" : "", has_input ? ", stage input" : "");
}

std::optional<DecodeGraphKey> DecodeGraphKeyFor(const StepPlan& plan, bool has_input, int64_t indexer_topk,
                                                int64_t max_tokens) {
  if (plan.seqs.empty() || static_cast<int64_t>(plan.seqs.size()) > max_tokens) return std::nullopt;
  DecodeGraphKey key;
  int64_t width = 1, max_context = 0;
  for (const auto& s : plan.seqs) {
    if (s.tokens.size() != 1) return std::nullopt;
    width = std::max<int64_t>(width, static_cast<int64_t>(s.block_table.size()));
    max_context = std::max<int64_t>(max_context, s.start_pos + 1);
  }
  key.tokens = static_cast<int64_t>(plan.seqs.size());
  key.logit_rows = static_cast<int64_t>(plan.logit_rows.size());
  key.table_stride = 1;
  while (key.table_stride < width) key.table_stride *= 2;
  key.select_all = indexer_topk > 0 && max_context <= indexer_topk;
  key.has_input = has_input;
  return key;
}

}  // namespace spar
