// An engine against a transformers golden record (tools/golden/make_goldens.py
// writes them; tools/train_tiny/hf_check.py for the trained tiny model):
//   {"prompts": [{"ids": [...], "logits": [[...] per row], "greedy": [...],
//                 "topk": [{"layer", "position", "indices"}]}],
//    "dense_control": {"ids", "logits"}}
// The checks the golden tests of the make-tiny variants and of the trained
// tiny chat model share, as gtest expectations; each returns what it counted
// so a test can assert that the comparison was not vacuous.
#ifndef SPAR_TESTS_ENGINE_GOLDEN_CHECKS_H_
#define SPAR_TESTS_ENGINE_GOLDEN_CHECKS_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "engine/engine.h"
#include "nlohmann/json.hpp"

namespace spar::testing {

inline std::vector<int32_t> GoldenIds(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

// max |ours - gold| over the row, relative to the largest |logit| of the golden.
inline double RelLogitError(const std::vector<float>& ours, const std::vector<double>& gold) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < gold.size(); ++i) {
    err = std::max(err, std::fabs(ours[i] - gold[i]));
    scale = std::max(scale, std::fabs(gold[i]));
  }
  return err / scale;
}

struct LogitsComparison {
  double worst = 0;  // largest RelLogitError over every row
  int longest = 0;   // longest prompt, in tokens
};

// Every prompt's last logit rows within `tol` (relative) of the golden's.
inline LogitsComparison ExpectPromptLogitsMatch(Engine& engine, const nlohmann::json& golden, double tol = 1e-3) {
  LogitsComparison r;
  for (const auto& p : golden["prompts"]) {
    const std::vector<int32_t> ids = GoldenIds(p["ids"]);
    r.longest = std::max<int>(r.longest, static_cast<int>(ids.size()));
    const int n = static_cast<int>(p["logits"].size());
    auto logits = engine.PromptLogits({ids}, n);
    EXPECT_TRUE(logits.ok()) << logits.status();
    if (!logits.ok()) continue;
    for (int i = 0; i < n; ++i) {
      const double e = RelLogitError((*logits)[0][i], p["logits"][i].get<std::vector<double>>());
      r.worst = std::max(r.worst, e);
      EXPECT_LE(e, tol) << "prompt of " << ids.size() << " tokens, logits row " << i;
    }
  }
  return r;
}

struct TopKComparison {
  int compared = 0;  // (layer, position) selections compared
  int sparse = 0;    // of them at positions past index_topk: a real choice
};

// The indexer's top-k sets (as positions, through the block table) equal
// the golden's at every recorded (layer, position).
inline TopKComparison ExpectTopKSetsMatch(Engine& engine, const nlohmann::json& golden) {
  const int topk = engine.config().index_topk;
  TopKComparison r;
  for (const auto& p : golden["prompts"]) {
    const std::vector<int32_t> ids = GoldenIds(p["ids"]);
    ForwardTrace trace;
    std::vector<std::vector<int32_t>> tables;
    const absl::Status st = engine.PromptLogits({ids}, 1, &trace, &tables).status();
    EXPECT_TRUE(st.ok()) << st;
    if (!st.ok()) continue;
    std::map<int32_t, int32_t> pos_of_slot;  // cache slot -> position
    for (size_t b = 0; b < tables[0].size(); ++b) {
      for (int o = 0; o < kCacheBlockTokens; ++o) {
        pos_of_slot[tables[0][b] * kCacheBlockTokens + o] = static_cast<int32_t>(b * kCacheBlockTokens + o);
      }
    }
    for (const auto& t : p["topk"]) {
      const int layer = t["layer"], position = t["position"];
      std::set<int32_t> want;
      for (int v : t["indices"]) want.insert(v);
      std::set<int32_t> got;
      const auto& slots = trace.topk_slots.at(layer);
      for (int j = 0; j < topk; ++j) {
        const int32_t s = slots[static_cast<size_t>(position) * topk + j];
        if (s >= 0) got.insert(pos_of_slot.at(s));
      }
      EXPECT_EQ(got, want) << "layer " << layer << " position " << position << " of " << ids.size();
      ++r.compared;
      r.sparse += position >= topk;
    }
  }
  return r;
}

// Greedy continuations of every prompt, all in one continuous batch
// (batching must not change results), equal the golden's.
inline void ExpectGreedyMatches(Engine& engine, const nlohmann::json& golden) {
  std::vector<GenerationRequest> reqs;
  for (const auto& p : golden["prompts"]) {
    GenerationRequest r;
    r.prompt = GoldenIds(p["ids"]);
    r.sampling.temperature = 0;
    r.max_tokens = static_cast<int>(p["greedy"].size());
    r.ignore_eos = true;
    reqs.push_back(r);
  }
  auto gens = engine.Generate(reqs);
  ASSERT_TRUE(gens.ok()) << gens.status();
  for (size_t i = 0; i < reqs.size(); ++i) {
    std::vector<int32_t> got;
    for (const auto& t : (*gens)[i].tokens) got.push_back(t.id);
    EXPECT_EQ(got, GoldenIds(golden["prompts"][i]["greedy"])) << "prompt " << i;
  }
}

}  // namespace spar::testing

#endif  // SPAR_TESTS_ENGINE_GOLDEN_CHECKS_H_
