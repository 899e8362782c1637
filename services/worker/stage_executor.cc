#include "services/worker/stage_executor.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/engine.h"

namespace spar {

absl::StatusOr<std::unique_ptr<StageExecutor>> StageExecutor::Load(const StageOptions& options) {
  if (options.model_dir.empty()) return absl::InvalidArgumentError("stage: no model directory");
  if (options.num_blocks < 1) {
    return absl::InvalidArgumentError(absl::StrCat("stage: num_blocks must be >= 1, got ", options.num_blocks));
  }
  auto exec = std::unique_ptr<StageExecutor>(new StageExecutor());
  exec->options_ = options;
  SPAR_ASSIGN_OR_RETURN(exec->cache_formats_, ResolveCacheFormats(options.backend, options.cache_dtypes));
  BackendOptions bo;
  bo.name = options.backend;
  bo.device = options.device;
  bo.enforce_eager = options.enforce_eager;
  bo.tp = options.tp;
  bo.nccl_unique_id = options.nccl_unique_id;
  bo.cpu_group = options.cpu_group;
  SPAR_ASSIGN_OR_RETURN(exec->backend_, CreateBackend(bo));
  ModelOptions mo;
  mo.first_layer = options.first_layer;
  mo.last_layer = options.last_layer;
  mo.num_blocks = options.num_blocks;
  mo.gpu_memory_utilization = options.gpu_memory_utilization;
  mo.max_model_len = options.max_model_len;
  if (options.num_speculative_tokens < 0 || options.num_speculative_tokens > kMaxSpeculativeTokens) {
    return absl::InvalidArgumentError(absl::StrCat("stage: --num-speculative-tokens must be 0 (off) to ",
                                                   kMaxSpeculativeTokens, ", got ", options.num_speculative_tokens));
  }
  mo.load_mtp = options.num_speculative_tokens > 0;  // on the last stage
  mo.latent_format = exec->cache_formats_.latent;
  mo.indexer_format = exec->cache_formats_.indexer;
  SPAR_ASSIGN_OR_RETURN(exec->model_, Model::Load(options.model_dir, exec->backend_.get(), mo));
  if (exec->model_->has_mtp()) exec->speculator_ = std::make_unique<Speculator>(exec->model_.get());
  exec->options_.num_blocks = exec->model_->num_blocks();  // what the memory budget gave
  exec->last_layer_ = options.last_layer < 0 ? exec->model_->config().num_hidden_layers : options.last_layer;
  exec->options_.last_layer = exec->last_layer_;
  if (exec->is_last_stage()) {
    exec->constraints_ = std::make_unique<ConstraintStates>(options.model_dir, exec->model_->config().vocab_size);
  }
  return exec;
}

absl::Status StageExecutor::TrackConstraint(const PlannedSequence& p, const std::vector<int32_t>& known) {
  const int64_t seq = p.step.seq_id;
  if (p.sampling) {
    SPAR_RETURN_IF_ERROR(constraints_->Reset(seq, *p.sampling));
    SPAR_RETURN_IF_ERROR(constraints_->Observe(seq, 0, p.sampling->cached_tokens));
  }
  if (p.speculation && constraints_->Constrained(seq)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence ", seq, ": a constrained sequence cannot speculate (the MTP layer's drafts are not masked)"));
  }
  return constraints_->Observe(seq, p.step.start_pos, known);
}

void StageExecutor::MaskRequest(int64_t seq_id, SampleRequest* request) {
  request->token_mask = constraints_->Mask(seq_id, request->step);
}

bool StageExecutor::FinishesConstraint(int64_t seq_id, int32_t token, uint64_t step) const {
  return constraints_->Finishes(seq_id, token, step);
}

void StageExecutor::TakeAllReduceTimes(StepTimings* timings) {
  for (double seconds : backend_->TakeCollectiveDurations()) timings->allreduce.push_back(absl::Seconds(seconds));
}

absl::StatusOr<StageOutput> StageExecutor::Execute(const MicroBatchPlan& plan, Activations input) {
  const bool last = is_last_stage();
  if (last) {
    for (int64_t id : plan.release) {
      sampling_.Release(id);
      constraints_->Release(id);
    }
  }
  StageOutput out;
  if (plan.seqs.empty()) return out;  // a release-only micro-batch

  StepPlan step;
  step.seqs.reserve(plan.seqs.size());
  for (const PlannedSequence& p : plan.seqs) step.seqs.push_back(p.step);
  const ModelConfig& c = config();
  SPAR_RETURN_IF_ERROR(step.Finalize(c.vocab_size, c.max_position_embeddings, model_->num_blocks()));

  if (last) {
    // Sampling states first, so a bad plan fails before any compute.
    for (const PlannedSequence& p : plan.seqs) {
      if (p.sampling) {
        const size_t cached = p.sampling->cached_tokens.size();
        if (static_cast<size_t>(p.step.start_pos) != cached) {
          return absl::InvalidArgumentError(absl::StrCat(
              "sequence ", p.step.seq_id, ": sampling state sent at start_pos ", p.step.start_pos, " with ", cached,
              " cached tokens (only a sequence's first chunk may carry it, after its cached prefix)"));
        }
        sampling_.Create(p.step.seq_id, *p.sampling);
        if (cached > 0) SPAR_RETURN_IF_ERROR(sampling_.Observe(p.step.seq_id, 0, p.sampling->cached_tokens));
      }
      // Drafts join the history once they are accepted (ExecuteSpeculative).
      const size_t drafts = p.speculation ? static_cast<size_t>(p.speculation->num_draft_tokens) : 0;
      const std::vector<int32_t> known(p.step.tokens.begin(),
                                       p.step.tokens.end() - static_cast<std::ptrdiff_t>(drafts));
      SPAR_RETURN_IF_ERROR(sampling_.Observe(p.step.seq_id, p.step.start_pos, known));
      SPAR_RETURN_IF_ERROR(TrackConstraint(p, known));
    }
  }

  Tensor in;
  if (!is_first_stage()) {
    if (input.rows != step.num_tokens() || input.cols != c.hidden_size || !input.Check().ok()) {
      return absl::InvalidArgumentError(absl::StrCat("hidden states are [", input.rows, ", ", input.cols, "] with ",
                                                     input.bytes.size(), " bytes; the plan needs [",
                                                     step.num_tokens(), ", ", c.hidden_size, "]"));
    }
    SPAR_ASSIGN_OR_RETURN(in, backend_->FromHostActivations(input));
  }
  const absl::Time forward_start = absl::Now();
  const bool speculative = last && std::any_of(plan.seqs.begin(), plan.seqs.end(),
                                               [](const PlannedSequence& p) { return p.speculation.has_value(); });
  if (speculative) {
    SPAR_RETURN_IF_ERROR(ExecuteSpeculative(plan, step, is_first_stage() ? nullptr : &in, &out));
    out.timings.forward = absl::Now() - forward_start;
    TakeAllReduceTimes(&out.timings);
    return out;
  }
  SPAR_ASSIGN_OR_RETURN(Tensor y, model_->Forward(step, is_first_stage() ? nullptr : &in));
  if (options_.delay_per_layer > absl::ZeroDuration() || options_.delay_per_token > absl::ZeroDuration()) {
    absl::SleepFor((options_.delay_per_layer + options_.delay_per_token * step.num_tokens()) *
                   (last_layer_ - options_.first_layer));
  }

  if (!last) {
    SPAR_ASSIGN_OR_RETURN(out.hidden, backend_->ToHostActivations(y));
    out.timings.forward = absl::Now() - forward_start;
    TakeAllReduceTimes(&out.timings);
    return out;
  }
  const absl::Time sampling_start = absl::Now();
  out.timings.forward = sampling_start - forward_start;
  std::vector<SampleRequest> requests;
  std::vector<int64_t> ids;
  for (const PlannedSequence& p : plan.seqs) {
    if (p.step.num_logits == 0) continue;
    if (p.step.num_logits != 1) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", p.step.seq_id, ": num_logits must be 0 or 1"));
    }
    SPAR_ASSIGN_OR_RETURN(SampleRequest r, sampling_.Request(p.step.seq_id));
    MaskRequest(p.step.seq_id, &r);
    requests.push_back(r);
    ids.push_back(p.step.seq_id);
  }
  if (requests.empty()) {
    TakeAllReduceTimes(&out.timings);
    return out;
  }
  SPAR_ASSIGN_OR_RETURN(std::vector<SampleResult> sampled, backend_->Sample(y, requests));
  out.timings.sampling = absl::Now() - sampling_start;
  TakeAllReduceTimes(&out.timings);
  if (sampled.size() != ids.size()) return absl::InternalError("sampler returned the wrong number of tokens");
  out.tokens.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    out.tokens.push_back({ids[i], sampled[i].token, sampled[i].logprob, std::move(sampled[i].top),
                          FinishesConstraint(ids[i], sampled[i].token, requests[i].step)});
  }
  return out;
}

absl::Status StageExecutor::ExecuteSpeculative(const MicroBatchPlan& plan, const StepPlan& step, const Tensor* input,
                                               StageOutput* out) {
  if (speculator_ == nullptr) {
    return absl::FailedPreconditionError(
        "a micro-batch asks for speculative decoding, but this last stage has no MTP layer loaded (start the "
        "worker with --num-speculative-tokens)");
  }
  std::vector<SpecSequenceStep> seqs(plan.seqs.size());
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const PlannedSequence& p = plan.seqs[i];
    SpecSequenceStep& s = seqs[i];
    s.speculative = p.speculation.has_value();
    if (s.speculative) {
      s.num_drafts = p.speculation->num_draft_tokens;
      s.drafts_wanted = p.speculation->num_drafts_wanted;
      s.next_token = p.speculation->next_token;
      if (std::max(s.num_drafts, s.drafts_wanted) > options_.num_speculative_tokens) {
        return absl::InvalidArgumentError(absl::StrCat("sequence ", p.step.seq_id, ": ",
                                                       std::max(s.num_drafts, s.drafts_wanted),
                                                       " speculative tokens, this worker serves at most ",
                                                       options_.num_speculative_tokens));
      }
    }
    if (p.step.num_logits > 0) {
      SPAR_ASSIGN_OR_RETURN(s.first, sampling_.Request(p.step.seq_id));
      MaskRequest(p.step.seq_id, &s.first);  // only ever non-speculative sequences (TrackConstraint)
    }
  }
  SPAR_ASSIGN_OR_RETURN(std::vector<SpecSequenceResult> results, speculator_->Step(step, input, seqs));
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const PlannedSequence& p = plan.seqs[i];
    SpecSequenceResult& r = results[i];
    if (r.tokens.empty()) continue;
    for (SampleResult& t : r.tokens) {
      const bool finishes = FinishesConstraint(p.step.seq_id, t.token, seqs[i].first.step);
      out->tokens.push_back({p.step.seq_id, t.token, t.logprob, std::move(t.top), finishes});
    }
    if (!p.speculation) continue;
    // The accepted drafts are now part of the sequence (and its penalties).
    const int32_t drafts_at = p.step.start_pos + static_cast<int32_t>(p.step.tokens.size()) - r.num_drafts;
    std::vector<int32_t> accepted(p.step.tokens.end() - r.num_drafts, p.step.tokens.end() - r.num_drafts + r.num_accepted);
    SPAR_RETURN_IF_ERROR(sampling_.Observe(p.step.seq_id, drafts_at, accepted));
    out->speculation.push_back({p.step.seq_id, r.num_drafts, r.num_accepted, std::move(r.drafts)});
  }
  return absl::OkStatus();
}

}  // namespace spar
