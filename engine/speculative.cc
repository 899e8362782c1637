#include "engine/speculative.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace spar {
namespace {

bool HasPenalties(const SamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
}

// The drafts of a plan sequence: its trailing num_drafts tokens.
std::vector<int32_t> DraftsOf(const SequenceStep& q, int num_drafts) {
  return std::vector<int32_t>(q.tokens.end() - num_drafts, q.tokens.end());
}

absl::Status CheckSequence(const SequenceStep& q, const SpecSequenceStep& s, bool has_mtp) {
  auto bad = [&](auto... parts) {
    return absl::InvalidArgumentError(absl::StrCat("sequence ", q.seq_id, ": ", parts...));
  };
  if (s.num_drafts < 0 || s.num_drafts > kMaxSpeculativeTokens) {
    return bad(s.num_drafts, " draft tokens (0 to ", kMaxSpeculativeTokens, ")");
  }
  if (s.drafts_wanted < 0 || s.drafts_wanted > kMaxSpeculativeTokens) {
    return bad(s.drafts_wanted, " drafts wanted (0 to ", kMaxSpeculativeTokens, ")");
  }
  if (s.num_drafts > 0 && q.num_logits != s.num_drafts + 1) {
    return bad(s.num_drafts, " drafts to verify need ", s.num_drafts + 1, " logits, the plan asks for ", q.num_logits);
  }
  if (s.num_drafts >= static_cast<int>(q.tokens.size())) {
    return bad(s.num_drafts, " drafts in a step of ", q.tokens.size(), " tokens (the first is never a draft)");
  }
  if (s.num_drafts == 0 && q.num_logits > 1) return bad("several logits without drafts to verify");
  if (s.speculative && (s.drafts_wanted > 0 || s.num_drafts > 0) && !has_mtp) {
    return absl::FailedPreconditionError(
        absl::StrCat("sequence ", q.seq_id, ": speculation asked of a stage without the MTP layer"));
  }
  if (s.speculative && has_mtp && q.num_logits == 0 && !s.next_token.has_value()) {
    return bad("a speculative prefill chunk without logits needs the token after it (the MTP layer's input)");
  }
  if (s.drafts_wanted > 0 && q.num_logits == 0) return bad("drafts wanted from a step without logits");
  return absl::OkStatus();
}

}  // namespace

int AcceptLongestMatch(const std::vector<int32_t>& drafts, const std::vector<int32_t>& target) {
  int a = 0;
  while (a < static_cast<int>(drafts.size()) && a + 1 < static_cast<int>(target.size()) && target[a] == drafts[a]) ++a;
  return a;
}

absl::StatusOr<std::vector<SpecSequenceResult>> Speculator::Step(const StepPlan& plan, const Tensor* input,
                                                                 const std::vector<SpecSequenceStep>& seqs) {
  if (seqs.size() != plan.seqs.size()) return absl::InvalidArgumentError("speculative step: one entry per sequence");
  for (size_t s = 0; s < seqs.size(); ++s) SPAR_RETURN_IF_ERROR(CheckSequence(plan.seqs[s], seqs[s], model_->has_mtp()));
  Backend& backend = *model_->backend();
  SPAR_ASSIGN_OR_RETURN(Tensor normed, model_->ForwardNormed(plan, input));
  std::vector<SpecSequenceResult> out(seqs.size());

  // Every logit row is sampled with its own request: row j of a sequence
  // is output index first.step + j, after the drafts d1 .. dj.
  std::vector<size_t> first_row(seqs.size());
  std::vector<SampleRequest> requests;
  std::vector<TokenHistory> histories;
  histories.reserve(plan.logit_rows.size());  // requests point into it
  for (size_t s = 0; s < seqs.size(); ++s) {
    const SequenceStep& q = plan.seqs[s];
    first_row[s] = requests.size();
    const std::vector<int32_t> drafts = DraftsOf(q, seqs[s].num_drafts);
    for (int j = 0; j < q.num_logits; ++j) {
      SampleRequest r = seqs[s].first;
      r.step += static_cast<uint64_t>(j);
      if (j > 0 && HasPenalties(r.params)) {
        histories.push_back(r.history != nullptr ? *r.history : TokenHistory());
        for (int i = 0; i < j; ++i) histories.back().output_counts[drafts[i]]++;
        r.history = &histories.back();
      }
      requests.push_back(r);
    }
  }
  std::vector<SampleResult> sampled;
  if (!requests.empty()) {
    SPAR_ASSIGN_OR_RETURN(Tensor rows, backend.GatherRows(normed, plan.logit_rows));
    SPAR_ASSIGN_OR_RETURN(Tensor logits, model_->HeadLogits(rows));
    SPAR_ASSIGN_OR_RETURN(sampled, backend.Sample(logits, requests));
    if (sampled.size() != requests.size()) return absl::InternalError("sampler returned the wrong number of tokens");
  }
  for (size_t s = 0; s < seqs.size(); ++s) {
    const SequenceStep& q = plan.seqs[s];
    if (q.num_logits == 0) continue;
    const std::vector<int32_t> drafts = DraftsOf(q, seqs[s].num_drafts);
    std::vector<int32_t> target(q.num_logits);
    for (int j = 0; j < q.num_logits; ++j) target[j] = sampled[first_row[s] + j].token;
    const int a = std::clamp(rule_(drafts, target), 0, seqs[s].num_drafts);
    for (int j = 0; j <= a; ++j) {
      SampleResult r = sampled[first_row[s] + j];
      if (j < a) r.token = drafts[j];  // the same token under the correct rule
      out[s].tokens.push_back(std::move(r));
    }
    out[s].num_drafts = seqs[s].num_drafts;
    out[s].num_accepted = a;
  }
  if (!model_->has_mtp()) return out;

  // The MTP layer over the step's rows of the speculative sequences: row j
  // reads the token at position + 1 (the target's token where the row was
  // sampled, the next prompt token otherwise) and the row's normed state.
  StepPlan mtp;
  std::vector<int32_t> hidden_rows;
  std::vector<size_t> drafting;     // sequences proposing drafts, in plan order
  std::vector<int32_t> pick_rows;   // their row in the MTP output: the last kept row
  std::vector<int32_t> positions;   // that row's position
  int32_t plan_row = 0, mtp_logit_rows = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const SequenceStep& q = plan.seqs[s];
    const int count = static_cast<int>(q.tokens.size());
    const int32_t row0 = plan_row;
    plan_row += count;
    if (!seqs[s].speculative) continue;
    SequenceStep m;
    m.seq_id = q.seq_id;
    m.start_pos = q.start_pos;
    m.block_table = q.block_table;
    const int sampled_from = count - q.num_logits;  // rows >= this were sampled
    const int a = out[s].num_accepted;
    for (int j = 0; j < count; ++j) {
      int32_t next;
      if (j >= sampled_from) {
        // Rows beyond the accepted ones get the target's token too: their
        // outputs are not used and their cache rows are rewritten later.
        const int r = j - sampled_from;
        next = r <= a ? out[s].tokens[r].token : sampled[first_row[s] + r].token;
      } else {
        next = j + 1 < count ? q.tokens[j + 1] : *seqs[s].next_token;
      }
      m.tokens.push_back(next);
      hidden_rows.push_back(row0 + j);
    }
    if (seqs[s].drafts_wanted > 0) {
      // Verify steps return every sampled row (one graph shape whatever
      // was accepted), the kept one is picked below.
      m.num_logits = q.num_logits;
      drafting.push_back(s);
      pick_rows.push_back(mtp_logit_rows + a);
      positions.push_back(q.start_pos + sampled_from + a);
      mtp_logit_rows += m.num_logits;
    } else {
      m.num_logits = 0;
    }
    mtp.seqs.push_back(std::move(m));
  }
  if (mtp.seqs.empty()) return out;
  const ModelConfig& c = model_->config();
  SPAR_RETURN_IF_ERROR(mtp.Finalize(c.vocab_size, c.max_position_embeddings, model_->num_blocks()));
  Tensor hidden = normed;
  if (static_cast<int64_t>(hidden_rows.size()) != normed.rows()) {
    SPAR_ASSIGN_OR_RETURN(hidden, backend.GatherRows(normed, hidden_rows));
  }
  SPAR_ASSIGN_OR_RETURN(Tensor mtp_out, model_->MtpForward(mtp, hidden));
  if (drafting.empty()) return out;
  SPAR_ASSIGN_OR_RETURN(Tensor picked, backend.GatherRows(mtp_out, pick_rows));
  SPAR_RETURN_IF_ERROR(Draft(plan, seqs, drafting, std::move(positions), std::move(picked), &out));
  return out;
}

absl::Status Speculator::Draft(const StepPlan& plan, const std::vector<SpecSequenceStep>& seqs,
                               const std::vector<size_t>& drafting, std::vector<int32_t> positions, Tensor mtp_rows,
                               std::vector<SpecSequenceResult>* out) {
  Backend& backend = *model_->backend();
  const ModelConfig& c = model_->config();
  std::vector<size_t> active = drafting;
  Tensor cur = std::move(mtp_rows);
  for (int i = 0;; ++i) {
    SPAR_ASSIGN_OR_RETURN(Tensor logits, model_->MtpLogits(cur));
    std::vector<SampleRequest> greedy(active.size());
    for (auto& r : greedy) r.params.temperature = 0.0f;  // drafts are the MTP layer's argmax
    SPAR_ASSIGN_OR_RETURN(std::vector<SampleResult> drafts, backend.Sample(logits, greedy));
    if (drafts.size() != active.size()) return absl::InternalError("sampler returned the wrong number of drafts");
    for (size_t k = 0; k < active.size(); ++k) (*out)[active[k]].drafts.push_back(drafts[k].token);
    // The next recurrent step: sequences that want more, one row each at
    // the next position, reading their draft and the layer's last output.
    StepPlan step;
    std::vector<size_t> next;
    std::vector<int32_t> keep, next_positions;
    for (size_t k = 0; k < active.size(); ++k) {
      if (seqs[active[k]].drafts_wanted <= i + 1) continue;
      SequenceStep m;
      m.seq_id = plan.seqs[active[k]].seq_id;
      m.start_pos = positions[k] + 1;
      m.tokens = {drafts[k].token};
      m.block_table = plan.seqs[active[k]].block_table;
      m.num_logits = 1;
      step.seqs.push_back(std::move(m));
      next.push_back(active[k]);
      keep.push_back(static_cast<int32_t>(k));
      next_positions.push_back(positions[k] + 1);
    }
    if (next.empty()) return absl::OkStatus();
    SPAR_RETURN_IF_ERROR(step.Finalize(c.vocab_size, c.max_position_embeddings, model_->num_blocks()));
    Tensor hidden = cur;
    if (keep.size() != active.size()) {
      SPAR_ASSIGN_OR_RETURN(hidden, backend.GatherRows(cur, keep));
    }
    SPAR_ASSIGN_OR_RETURN(cur, model_->MtpForward(step, hidden));
    active = std::move(next);
    positions = std::move(next_positions);
  }
}

}  // namespace spar
