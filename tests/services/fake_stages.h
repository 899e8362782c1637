// A fake pipeline for scheduler tests: it executes micro-batch plans like
// the real stages do, without a model. Tokens are written into a KV "cache"
// indexed by the plan's block tables; the next token is a hash of the
// sequence's tokens read back through its block table, its seed and step.
// So wrong block tables (shared or stale blocks), a wrong resume after
// preemption, or a broken sampling-state contract all change the output.
//
// Speculative sequences: every row of a verify step is "sampled" the same
// way (row j sees the drafts before it), the longest matching prefix is
// accepted, and the proposals for the next step are the true continuation
// with every few tokens deliberately wrong, so steps accept some drafts
// and reject others. The drafting's positions must be in the block table.
// The MTP layer's own cache is modelled too: its row at a position holds
// the token after it that the row read (the next prompt token, an accepted
// draft or the target's token); rows of rejected drafts and the drafting's
// positions hold garbage until a later step rewrites them. Every step of a
// speculative sequence checks the rows before its kept end read back
// through the block table, so a shared block whose MTP rows another
// sequence computed with another next token (a prefix-cache key that
// ignored the token after the block) fails the micro-batch.
#ifndef SPAR_TESTS_SERVICES_FAKE_STAGES_H_
#define SPAR_TESTS_SERVICES_FAKE_STAGES_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/step_plan.h"
#include "services/common/micro_batch.h"
#include "services/worker/sampling_states.h"

namespace spar::testing {

class FakeStages {
 public:
  FakeStages(int64_t num_blocks, int32_t vocab)
      : cache_(num_blocks * kCacheBlockTokens, -1), mtp_(num_blocks * kCacheBlockTokens, -1), vocab_(vocab) {}

  MicroBatchResult Execute(const MicroBatchPlan& plan) {
    MicroBatchResult r;
    r.id = plan.id;
    for (int64_t id : plan.release) states_.Release(id);
    for (const PlannedSequence& p : plan.seqs) {
      const SequenceStep& s = p.step;
      if (p.sampling) {
        // As the last stage does: a sequence starts after its cached prefix.
        if (static_cast<size_t>(s.start_pos) != p.sampling->cached_tokens.size()) {
          r.status = absl::InvalidArgumentError(absl::StrCat("seq ", s.seq_id, ": sampling state at start_pos ",
                                                             s.start_pos, " with ", p.sampling->cached_tokens.size(),
                                                             " cached tokens"));
          return r;
        }
        states_.Create(s.seq_id, *p.sampling);
        if (s.start_pos > 0) states_.Observe(s.seq_id, 0, p.sampling->cached_tokens).IgnoreError();
      }
      const size_t drafts = p.speculation ? static_cast<size_t>(p.speculation->num_draft_tokens) : 0;
      if (p.speculation && s.num_logits == 0 && !p.speculation->next_token) {
        r.status = absl::InvalidArgumentError(absl::StrCat("seq ", s.seq_id, ": speculative chunk without next token"));
        return r;
      }
      std::vector<int32_t> known(s.tokens.begin(), s.tokens.end() - static_cast<std::ptrdiff_t>(drafts));
      if (absl::Status st = states_.Observe(s.seq_id, s.start_pos, known); !st.ok()) {
        r.status = st;
        return r;
      }
      for (size_t i = 0; i < s.tokens.size(); ++i) {
        const int32_t pos = s.start_pos + static_cast<int32_t>(i);
        const size_t block = pos / kCacheBlockTokens;
        if (block >= s.block_table.size()) {
          r.status = absl::InvalidArgumentError(absl::StrCat("seq ", s.seq_id, ": no block for position ", pos));
          return r;
        }
        cache_[s.block_table[block] * kCacheBlockTokens + pos % kCacheBlockTokens] = s.tokens[i];
      }
    }
    // Sample after every write of the micro-batch, as a real forward does.
    for (const PlannedSequence& p : plan.seqs) {
      const SequenceStep& s = p.step;
      if (s.num_logits == 0) {
        if (!p.speculation) continue;
        // The MTP layer over a prefill chunk: row j reads the token after it.
        const int32_t end = s.start_pos + static_cast<int32_t>(s.tokens.size());
        for (int32_t pos = s.start_pos; pos < end; ++pos) {
          const size_t j = static_cast<size_t>(pos - s.start_pos);
          Mtp(s, pos) = j + 1 < s.tokens.size() ? s.tokens[j + 1] : *p.speculation->next_token;
        }
        if (absl::Status st = CheckMtpRows(s, end, *p.speculation->next_token); !st.ok()) {
          r.status = st;
          return r;
        }
        continue;
      }
      auto req = states_.Request(s.seq_id);
      if (!req.ok()) {
        r.status = req.status();
        return r;
      }
      const int n = p.speculation ? p.speculation->num_draft_tokens : 0;
      const int32_t known_end = s.start_pos + static_cast<int32_t>(s.tokens.size()) - n;
      std::vector<int32_t> seq;  // the sequence as the cache holds it, drafts included
      for (int32_t pos = 0; pos < known_end + n; ++pos) {
        seq.push_back(cache_[s.block_table[pos / kCacheBlockTokens] * kCacheBlockTokens + pos % kCacheBlockTokens]);
      }
      // Row j sees the known tokens and drafts d1 .. dj.
      int accepted = 0;
      std::vector<int32_t> target;
      for (int j = 0; j <= n; ++j) {
        target.push_back(Next(seq, known_end + j, req->params.seed, req->step + j));
        if (j < n && target[j] != s.tokens[s.tokens.size() - n + j]) break;
        if (j < n) ++accepted;
      }
      for (int32_t t : target) r.tokens.push_back({s.seq_id, t, -1.0f, {}});
      if (!p.speculation) continue;
      std::vector<int32_t> taken(s.tokens.end() - n, s.tokens.end() - n + accepted);
      if (absl::Status st = states_.Observe(s.seq_id, known_end, taken); !st.ok()) {
        r.status = st;
        return r;
      }
      SpeculationOutcome o{s.seq_id, n, accepted, {}};
      // The MTP layer over the step's rows: the known ones read the token
      // after them, sampled ones the target's; rows past the kept ones get
      // garbage here (what they read is never used).
      const int32_t kept_end = known_end + accepted;
      const int32_t sampled_from = known_end - 1;
      for (int32_t pos = s.start_pos; pos < known_end + n; ++pos) {
        const size_t j = static_cast<size_t>(pos - s.start_pos);
        if (pos < sampled_from) {
          Mtp(s, pos) = s.tokens[j + 1];
        } else {
          const int row = pos - sampled_from;
          Mtp(s, pos) = row <= accepted ? target[row] : -2;
        }
      }
      if (absl::Status st = CheckMtpRows(s, kept_end, target.back()); !st.ok()) {
        r.status = st;
        return r;
      }
      // Proposals: the true continuation, every few one deliberately wrong.
      seq.resize(kept_end);
      seq.push_back(target.back());
      // The MTP layer's recurrent steps write the positions after the last
      // kept row (known_end + accepted - 1), one per further draft.
      const int32_t last_write = known_end + accepted - 1 + std::max(p.speculation->num_drafts_wanted - 1, 0);
      const int wanted = p.speculation->num_drafts_wanted;
      if (static_cast<size_t>(last_write / kCacheBlockTokens) >= s.block_table.size()) {
        r.status = absl::InvalidArgumentError(
            absl::StrCat("seq ", s.seq_id, ": drafting position ", last_write, " is not in the block table"));
        return r;
      }
      for (int i = 0; i < wanted; ++i) {
        int32_t d = Next(seq, static_cast<int32_t>(seq.size()), req->params.seed, req->step + accepted + 1 + i);
        if ((d + seq.size()) % 3 == 0) d = (d + 1) % vocab_;
        o.drafts.push_back(d);
        seq.push_back(d);
        // The recurrent step for the next draft writes the next position.
        if (i + 1 < wanted) Mtp(s, kept_end + i) = -3;
      }
      r.speculation.push_back(std::move(o));
    }
    return r;
  }

  size_t num_states() const { return states_.size(); }

 private:
  int32_t& Mtp(const SequenceStep& s, int32_t pos) {
    return mtp_[s.block_table[pos / kCacheBlockTokens] * kCacheBlockTokens + pos % kCacheBlockTokens];
  }
  int32_t Cached(const SequenceStep& s, int32_t pos) const {
    return cache_[s.block_table[pos / kCacheBlockTokens] * kCacheBlockTokens + pos % kCacheBlockTokens];
  }
  // The MTP rows at [0, end) of `s` read the tokens the sequence has after
  // them (`next` after the last).
  absl::Status CheckMtpRows(const SequenceStep& s, int32_t end, int32_t next) {
    for (int32_t pos = 0; pos < end; ++pos) {
      const int32_t want = pos + 1 < end ? Cached(s, pos + 1) : next;
      if (Mtp(s, pos) != want) {
        return absl::InternalError(absl::StrCat("seq ", s.seq_id, ": the MTP row at position ", pos, " read token ",
                                                Mtp(s, pos), ", the sequence has ", want, " after it"));
      }
    }
    return absl::OkStatus();
  }

  // The token after seq[0, end), output index `step`.
  int32_t Next(const std::vector<int32_t>& seq, int32_t end, uint64_t seed, uint64_t step) const {
    uint64_t h = 1469598103934665603ull ^ seed;
    for (int32_t pos = 0; pos < end; ++pos) h = (h ^ static_cast<uint64_t>(seq[pos] + 7)) * 1099511628211ull;
    h = (h ^ step) * 1099511628211ull;
    return static_cast<int32_t>((h >> 17) % vocab_);
  }

  std::vector<int32_t> cache_;
  std::vector<int32_t> mtp_;  // the MTP layer's cache rows: the token each read
  int32_t vocab_;
  SamplingStates states_;
};

}  // namespace spar::testing

#endif  // SPAR_TESTS_SERVICES_FAKE_STAGES_H_
