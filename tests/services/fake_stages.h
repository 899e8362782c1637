// A fake pipeline for scheduler tests: it executes micro-batch plans like
// the real stages do, without a model. Tokens are written into a KV "cache"
// indexed by the plan's block tables; the next token is a hash of the
// sequence's tokens read back through its block table, its seed and step.
// So wrong block tables (shared or stale blocks), a wrong resume after
// preemption, or a broken sampling-state contract all change the output.
#ifndef SPAR_TESTS_SERVICES_FAKE_STAGES_H_
#define SPAR_TESTS_SERVICES_FAKE_STAGES_H_

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/step_plan.h"
#include "services/common/micro_batch.h"
#include "services/worker/sampling_states.h"

namespace spar::testing {

class FakeStages {
 public:
  FakeStages(int64_t num_blocks, int32_t vocab) : cache_(num_blocks * kCacheBlockTokens, -1), vocab_(vocab) {}

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
      if (absl::Status st = states_.Observe(s.seq_id, s.start_pos, s.tokens); !st.ok()) {
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
      if (s.num_logits == 0) continue;
      auto req = states_.Request(s.seq_id);
      if (!req.ok()) {
        r.status = req.status();
        return r;
      }
      const int32_t end = s.start_pos + static_cast<int32_t>(s.tokens.size());
      uint64_t h = 1469598103934665603ull ^ req->params.seed;
      for (int32_t pos = 0; pos < end; ++pos) {
        const int32_t t = cache_[s.block_table[pos / kCacheBlockTokens] * kCacheBlockTokens + pos % kCacheBlockTokens];
        h = (h ^ static_cast<uint64_t>(t + 7)) * 1099511628211ull;
      }
      h = (h ^ req->step) * 1099511628211ull;
      r.tokens.push_back({s.seq_id, static_cast<int32_t>((h >> 17) % vocab_), -1.0f, {}});
    }
    return r;
  }

  size_t num_states() const { return states_.size(); }

 private:
  std::vector<int32_t> cache_;
  int32_t vocab_;
  SamplingStates states_;
};

}  // namespace spar::testing

#endif  // SPAR_TESTS_SERVICES_FAKE_STAGES_H_
