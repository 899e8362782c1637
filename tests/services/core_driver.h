// Driving a SchedulerCore against the fake pipeline (fake_stages.h) in
// tests: requests, options, and a loop that keeps up to max_in_flight
// micro-batches "on the wire", returns their results in order and checks
// the block ledger after every step, and every plan's writes against it.
#ifndef SPAR_TESTS_SERVICES_CORE_DRIVER_H_
#define SPAR_TESTS_SERVICES_CORE_DRIVER_H_

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <vector>

#include "base/rng.h"
#include "gtest/gtest.h"
#include "services/scheduler/scheduler_core.h"
#include "tests/services/fake_stages.h"

namespace spar::testing {

inline constexpr int32_t kVocab = 1000;

inline std::vector<int32_t> Prompt(int n, int salt) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = (i * 37 + salt * 101) % kVocab;
  return p;
}

// `n` seeded random token ids (prompts that share only what they copy).
inline std::vector<int32_t> RandomTokens(int n, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> t(n);
  for (auto& v : t) v = static_cast<int32_t>(rng.Below(kVocab));
  return t;
}

inline std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

inline SequenceRequest Request(std::vector<int32_t> prompt, int max_tokens, uint64_t seed) {
  SequenceRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.seed = seed;
  r.ignore_eos = true;
  return r;
}

inline SequenceRequest Seq(int prompt_len, int max_tokens, uint64_t seed, int salt = 0) {
  SequenceRequest r;
  r.prompt = Prompt(prompt_len, salt);
  r.max_tokens = max_tokens;
  r.sampling.seed = seed;
  r.ignore_eos = true;
  return r;
}

inline CoreOptions Options(int64_t blocks, int64_t budget = 512, int in_flight = 1) {
  CoreOptions o;
  o.num_blocks = blocks;
  o.limits.max_batch_tokens = budget;
  o.max_in_flight = in_flight;
  o.max_model_len = 4096;
  o.balance = false;
  return o;
}

struct RunResult {
  std::map<int64_t, std::vector<int32_t>> outputs;
  std::map<int64_t, SeqFinish> finishes;
  int micro_batches = 0;
};

// The positions a planned sequence writes: its tokens (drafts included) and,
// under speculation, the MTP layer's drafting after them; none of them may
// fall in a block another sequence holds or the prefix cache has keyed.
inline void ExpectWritesOwnBlocks(const SchedulerCore& core, const MicroBatchPlan& plan) {
  for (const PlannedSequence& p : plan.seqs) {
    const int64_t from = p.step.start_pos;
    int64_t to = from + static_cast<int64_t>(p.step.tokens.size());
    if (p.speculation) to += std::max(p.speculation->num_drafts_wanted - 1, 0);
    const absl::Status s = core.ledger().CheckWritable(p.step.seq_id, from, to);
    EXPECT_TRUE(s.ok()) << "micro-batch " << plan.id << ": " << s;
  }
}

// Runs the core to completion against the fake pipeline, keeping up to
// max_in_flight micro-batches "on the wire" and returning results in order.
// Checks every plan's writes and the block ledger after every step.
inline RunResult Drive(SchedulerCore& core, FakeStages& fake,
                       const std::function<void(const MicroBatchPlan&)>& inspect = nullptr) {
  RunResult out;
  std::deque<MicroBatchPlan> wire;
  const absl::Time now = absl::UnixEpoch();
  for (int iter = 0; iter < 100000; ++iter) {
    while (auto plan = core.NextMicroBatch(now)) {
      ExpectWritesOwnBlocks(core, *plan);
      if (inspect) inspect(*plan);
      wire.push_back(std::move(*plan));
      ++out.micro_batches;
    }
    if (wire.empty()) break;
    MicroBatchResult r = fake.Execute(wire.front());
    wire.pop_front();
    EXPECT_TRUE(r.status.ok()) << r.status;
    for (const SeqEvent& e : core.OnResult(r)) {
      if (e.token) out.outputs[e.seq].push_back(e.token->token);
      if (e.finish) out.finishes[e.seq] = *e.finish;
    }
    EXPECT_TRUE(core.ledger().CheckConsistency().ok()) << core.ledger().CheckConsistency();
  }
  return out;
}

}  // namespace spar::testing

#endif  // SPAR_TESTS_SERVICES_CORE_DRIVER_H_
