// Speculative decoding with the model's own multi-token-prediction layer,
// on the last stage: one step verifies the drafts of the previous step with
// the main model, accepts what the target agrees with, and lets the MTP
// layer propose the next drafts. The in-process engine and the worker's last
// stage both run it; what to verify and how many drafts to propose are the
// caller's decisions (the scheduler's, in the services).
//
// A sequence's step carries [t, d1 .. dn]: t the last token that is known,
// d the drafts. The main model's logits at those n + 1 rows give the target
// token y_j at every row (sampled with the row's own request: output index
// and penalty history include d1 .. dj). The drafts are greedy (the MTP
// layer's argmax, as vLLM's MTP proposer), so the acceptance rule of
// speculative sampling (Leviathan et al.) with a one-hot draft — accept d_j
// with probability p_j(d_j), else sample from p_j without d_j — is exactly
// "accept while y_j == d_{j+1}": each y_j is drawn from p_j with the
// sampler's counter-based (seed, output index) draw, so the output is the
// token sequence the model gives without speculation, for greedy and for
// seeded sampling alike, and its distribution is the target's.
//
// The MTP layer then runs over the rows that stay (row j reads the token
// after it and the main model's normed state of row j; its caches get
// those rows), and recurrently for more drafts: step i reads its previous
// draft and its own previous output. Rejected rows leave nothing that is
// read later: a row's cache slots are rewritten by the step that next
// covers its position before any query can see them.
#ifndef SPAR_ENGINE_SPECULATIVE_H_
#define SPAR_ENGINE_SPECULATIVE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend.h"
#include "engine/model.h"
#include "engine/speculation_limits.h"
#include "engine/step_plan.h"

namespace spar {

// One plan sequence's part of a speculative step, in plan order.
struct SpecSequenceStep {
  // Run the MTP layer over this sequence's rows (false: a sequence that is
  // not speculative; it is only verified and sampled as usual).
  bool speculative = true;
  // The request for the sequence's first sampled row: its parameters, the
  // penalty history before the drafts, the output index of that token.
  SampleRequest first;
  // Trailing tokens of the step's tokens that are drafts to verify; the
  // sequence then asks for num_drafts + 1 logits.
  int num_drafts = 0;
  // Drafts to propose for the next step (0: none). The block table must
  // cover SpeculativeStepEnd (speculation_limits.h).
  int drafts_wanted = 0;
  // A prefill chunk without logits: the token after it (the MTP layer's
  // input at the chunk's last row). Required for speculative sequences.
  std::optional<int32_t> next_token;
};

struct SpecSequenceResult {
  // The target's tokens: the accepted drafts, then the target's own next
  // token. Empty for a sequence without logits.
  std::vector<SampleResult> tokens;
  int num_drafts = 0;    // drafts verified
  int num_accepted = 0;  // of them accepted (tokens.size() - 1)
  std::vector<int32_t> drafts;  // proposals for the next step
};

// Decides how many drafts a step accepts: `drafts` d1 .. dn and the
// target's tokens y0 .. yn (y_j sampled after d1 .. dj). The output is
// d1 .. da then y_a. The rule speculative decoding is correct with is
// AcceptLongestMatch; tests plug in wrong ones to show they are caught.
using AcceptanceRule = std::function<int(const std::vector<int32_t>& drafts, const std::vector<int32_t>& target)>;
int AcceptLongestMatch(const std::vector<int32_t>& drafts, const std::vector<int32_t>& target);

class Speculator {
 public:
  explicit Speculator(Model* model, AcceptanceRule rule = AcceptLongestMatch)
      : model_(model), rule_(std::move(rule)) {}

  // One last-stage step: `plan` finalized, `input` the previous stage's
  // hidden states (null on a single stage), `seqs` one per plan sequence.
  // A sequence with drafts must ask for num_drafts + 1 logits; one without
  // for 0 or 1.
  absl::StatusOr<std::vector<SpecSequenceResult>> Step(const StepPlan& plan, const Tensor* input,
                                                       const std::vector<SpecSequenceStep>& seqs);

 private:
  // Draft rows of the MTP layer for the sequences in `drafting`, from the
  // layer's output rows `mtp_rows` (one per drafting sequence, at position
  // `positions`): proposes up to drafts_wanted tokens each.
  absl::Status Draft(const StepPlan& plan, const std::vector<SpecSequenceStep>& seqs,
                     const std::vector<size_t>& drafting, std::vector<int32_t> positions, Tensor mtp_rows,
                     std::vector<SpecSequenceResult>* out);

  Model* model_;
  AcceptanceRule rule_;
};

}  // namespace spar

#endif  // SPAR_ENGINE_SPECULATIVE_H_
