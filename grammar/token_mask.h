// The token mask at a matcher's position: the bitset of ids the sampler may
// pick ([ceil(vocab / 32)] uint32 words, bit i of word i / 32 = id i
// allowed), from the stack tops' precomputed tables (state_masks.h) plus
// the escaping tokens matched against the real stack.
//
// Budget: with `remaining` tokens left after this one, a token is allowed
// only if the output can still be completed in time afterwards, counting
// one token per byte still needed (an upper bound, since every byte a
// completion needs has a one-byte token in byte-level vocabularies). So an
// output under a constraint always parses by max_tokens, whatever the
// model prefers (the tiny test models know no JSON at all).
//
// End tokens (EOS, stop token ids) are allowed only where the output is
// complete and never as text; special added tokens only when listed in
// `allowed_special`. If nothing fits the budget (it was smaller than the
// shortest output from the start), the output is finished as soon as
// possible instead (the smallest budget that allows a token); if still
// nothing, the end tokens are allowed, so sampling always has a choice.
#ifndef SPAR_GRAMMAR_TOKEN_MASK_H_
#define SPAR_GRAMMAR_TOKEN_MASK_H_

#include <cstdint>
#include <vector>

#include "grammar/matcher.h"
#include "grammar/state_masks.h"

namespace spar::grammar {

struct MaskOptions {
  int64_t remaining = -1;               // tokens after this one; < 0: unbounded
  std::vector<int32_t> end_ids;         // ids that end the sequence
  std::vector<int32_t> allowed_special; // special ids the syntax writes
};

struct MaskStats {
  int stacks = 0;
  int escape_groups = 0;  // rests matched against the real stack
  bool budget_applied = false;
  bool budget_dropped = false;  // nothing fit the budget: finishing as soon as possible
};

// Fills `words` (vocab.mask_words() of them) with the mask.
MaskStats FillTokenMask(StateMasks& tables, const GrammarMatcher& matcher, const MaskOptions& options,
                        uint32_t* words);

inline bool MaskAllows(const uint32_t* words, int32_t id) { return (words[id >> 5] >> (id & 31)) & 1u; }

}  // namespace spar::grammar

#endif  // SPAR_GRAMMAR_TOKEN_MASK_H_
