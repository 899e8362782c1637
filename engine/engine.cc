#include "engine/engine.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/cpu/cpu_backend.h"
#ifdef SPAR_HAVE_CUDA_BACKEND
#include "engine/cuda/cuda_backend.h"
#endif

namespace spar {

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const std::string& name) {
  BackendOptions options;
  options.name = name;
  return CreateBackend(options);
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& options) {
  const std::string& name = options.name;
  if (name == "cpu") {
    if (options.tp.size == 1) return CreateCpuBackend();
    return CreateCpuBackend(options.tp, options.cpu_group);
  }
  if (name == "cuda") {
#ifdef SPAR_HAVE_CUDA_BACKEND
    CudaBackendOptions cuda;
    cuda.device = options.device;
    cuda.tp = options.tp;
    cuda.nccl_unique_id = options.nccl_unique_id;
    cuda.cuda_graphs = !options.enforce_eager;
    return CreateCudaBackend(cuda);
#else
    return absl::UnimplementedError("this binary was built without CUDA (use --backend cpu)");
#endif
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown backend \"", name, "\" (cpu or cuda)"));
}

absl::StatusOr<std::string> NewNcclGroupId() {
#ifdef SPAR_HAVE_CUDA_BACKEND
  return NewNcclUniqueId();
#else
  return absl::UnimplementedError("this binary was built without CUDA: no NCCL (use --backend cpu)");
#endif
}

absl::Status ValidateRequest(const GenerationRequest& r, const ModelConfig& c) {
  if (r.prompt.empty()) return absl::InvalidArgumentError("prompt is empty: at least one token is required");
  for (size_t i = 0; i < r.prompt.size(); ++i) {
    if (r.prompt[i] < 0 || r.prompt[i] >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("prompt token ", i, " has id ", r.prompt[i],
                                                     ", outside the vocabulary [0, ", c.vocab_size, ")"));
    }
  }
  if (r.max_tokens < 1) return absl::InvalidArgumentError(absl::StrCat("max_tokens must be >= 1, got ", r.max_tokens));
  const int64_t total = static_cast<int64_t>(r.prompt.size()) + r.max_tokens;
  if (total > c.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("prompt (", r.prompt.size(), " tokens) + max_tokens (",
                                                   r.max_tokens, ") exceeds the model's context of ",
                                                   c.max_position_embeddings, " tokens"));
  }
  for (int32_t id : r.stop_token_ids) {
    if (id < 0 || id >= c.vocab_size) return absl::InvalidArgumentError(absl::StrCat("stop token id ", id, " out of range"));
  }
  SamplingParams sampling = r.sampling;  // the one rule set (base/sampling_params.h)
  if (auto bad = CheckSamplingParams(&sampling)) {
    return absl::InvalidArgumentError(absl::StrCat(bad->field, " ", bad->rule, ", got ", bad->got));
  }
  if (r.top_logprobs < 0 || r.top_logprobs > 20) return absl::InvalidArgumentError("logprobs must be in [0, 20]");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const std::string& model_dir, const EngineOptions& options) {
  BackendOptions backend_options = options.backend_options;
  backend_options.name = options.backend;
  ModelOptions model_options = options.model;
  SPAR_ASSIGN_OR_RETURN(CacheFormats formats, ResolveCacheFormats(options.backend, options.cache_dtypes));
  model_options.latent_format = formats.latent;
  model_options.indexer_format = formats.indexer;
  SPAR_ASSIGN_OR_RETURN(auto backend, CreateBackend(backend_options));
  SPAR_ASSIGN_OR_RETURN(auto model, Model::Load(model_dir, backend.get(), model_options));
  if (!model->is_first_stage() || !model->is_last_stage()) {
    return absl::InvalidArgumentError("the in-process engine runs the whole model (one stage)");
  }
  return std::unique_ptr<Engine>(new Engine(std::move(backend), std::move(model), options));
}

absl::StatusOr<std::vector<std::vector<std::vector<float>>>> Engine::PromptLogits(
    const std::vector<std::vector<int32_t>>& prompts, int num_logits, ForwardTrace* trace,
    std::vector<std::vector<int32_t>>* block_tables) {
  StepPlan plan;
  std::vector<std::vector<int32_t>> tables(prompts.size());
  auto release = [&] {
    for (auto& t : tables) allocator_.Release(&t).IgnoreError();
  };
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest probe;
    probe.prompt = prompts[i];
    probe.max_tokens = 1;
    if (auto s = ValidateRequest(probe, config()); !s.ok()) {
      release();
      return s;
    }
    if (auto s = allocator_.Grow(&tables[i], static_cast<int64_t>(prompts[i].size())); !s.ok()) {
      release();
      return s;
    }
    SequenceStep seq;
    seq.seq_id = static_cast<int64_t>(i);
    seq.tokens = prompts[i];
    seq.block_table = tables[i];
    seq.num_logits = std::min<int>(num_logits, static_cast<int>(prompts[i].size()));
    plan.seqs.push_back(std::move(seq));
  }
  absl::Status st = plan.Finalize(config().vocab_size, config().max_position_embeddings, model_->num_blocks());
  absl::StatusOr<Tensor> logits = st.ok() ? model_->Forward(plan, nullptr, trace) : absl::StatusOr<Tensor>(st);
  if (block_tables != nullptr) *block_tables = tables;
  release();
  SPAR_RETURN_IF_ERROR(logits.status());
  SPAR_ASSIGN_OR_RETURN(std::vector<float> host, backend_->ToHost(*logits));
  std::vector<std::vector<std::vector<float>>> out(prompts.size());
  const int64_t vocab = logits->cols();
  size_t row = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (int j = 0; j < plan.seqs[i].num_logits; ++j, ++row) {
      out[i].emplace_back(host.begin() + row * vocab, host.begin() + (row + 1) * vocab);
    }
  }
  return out;
}

absl::StatusOr<std::vector<Generation>> Engine::Generate(
    const std::vector<GenerationRequest>& requests, const std::function<void(size_t, const GeneratedToken&)>& on_token) {
  struct Seq {
    std::vector<int32_t> tokens;  // prompt then generated
    int32_t cached = 0;           // tokens in the cache
    size_t prompt_len = 0;
    std::vector<int32_t> table;
    TokenHistory history;
    SamplingParams sampling;
    bool done = false;
  };
  for (const auto& r : requests) SPAR_RETURN_IF_ERROR(ValidateRequest(r, config()));
  std::vector<Seq> seqs(requests.size());
  std::vector<Generation> out(requests.size());
  std::random_device rd;
  for (size_t i = 0; i < requests.size(); ++i) {
    seqs[i].tokens = requests[i].prompt;
    seqs[i].prompt_len = requests[i].prompt.size();
    seqs[i].sampling = requests[i].sampling;
    seqs[i].sampling.seed = requests[i].seed ? *requests[i].seed : (static_cast<uint64_t>(rd()) << 32) ^ rd();
    for (int32_t id : requests[i].prompt) seqs[i].history.prompt_counts[id]++;
  }
  auto release_all = [&] {
    for (auto& s : seqs) allocator_.Release(&s.table).IgnoreError();
  };
  const auto& eos = config().eos_token_ids;
  for (;;) {
    StepPlan plan;
    std::vector<size_t> sampled;  // request index per logits row
    int64_t budget = options_.max_batch_tokens;
    for (size_t i = 0; i < seqs.size(); ++i) {
      Seq& s = seqs[i];
      if (s.done) continue;
      const int64_t remaining = static_cast<int64_t>(s.tokens.size()) - s.cached;
      const int64_t take = std::min<int64_t>(remaining, std::max<int64_t>(budget, 1));
      if (take <= 0 || (budget <= 0 && !plan.seqs.empty())) continue;
      if (auto st = allocator_.Grow(&s.table, s.cached + take); !st.ok()) {
        release_all();
        return st;
      }
      SequenceStep step;
      step.seq_id = static_cast<int64_t>(i);
      step.start_pos = s.cached;
      step.tokens.assign(s.tokens.begin() + s.cached, s.tokens.begin() + s.cached + take);
      step.block_table = s.table;
      step.num_logits = take == remaining ? 1 : 0;
      if (step.num_logits) sampled.push_back(i);
      plan.seqs.push_back(std::move(step));
      budget -= take;
    }
    if (plan.seqs.empty()) break;
    if (auto st = plan.Finalize(config().vocab_size, config().max_position_embeddings, model_->num_blocks());
        !st.ok()) {
      release_all();
      return st;
    }
    absl::StatusOr<Tensor> logits = model_->Forward(plan, nullptr);
    if (!logits.ok()) {
      release_all();
      return logits.status();
    }
    for (const auto& step : plan.seqs) seqs[step.seq_id].cached += static_cast<int32_t>(step.tokens.size());
    if (sampled.empty()) continue;
    std::vector<SampleRequest> sreq(sampled.size());
    for (size_t j = 0; j < sampled.size(); ++j) {
      Seq& s = seqs[sampled[j]];
      sreq[j].params = s.sampling;
      sreq[j].history = &s.history;
      sreq[j].step = s.tokens.size() - s.prompt_len;
      sreq[j].top_logprobs = requests[sampled[j]].top_logprobs;
    }
    auto results = backend_->Sample(*logits, sreq);
    if (!results.ok()) {
      release_all();
      return results.status();
    }
    for (size_t j = 0; j < sampled.size(); ++j) {
      const size_t i = sampled[j];
      Seq& s = seqs[i];
      const GenerationRequest& r = requests[i];
      const auto& res = (*results)[j];
      const bool is_eos = !r.ignore_eos && std::find(eos.begin(), eos.end(), res.token) != eos.end();
      const bool is_stop = std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), res.token) !=
                           r.stop_token_ids.end();
      if (is_eos || is_stop) {
        out[i].finish = FinishReason::kStop;
        out[i].stop_token = res.token;
        s.done = true;
        continue;
      }
      GeneratedToken tok{res.token, res.logprob, res.top};
      out[i].tokens.push_back(tok);
      if (on_token) on_token(i, tok);
      s.tokens.push_back(res.token);
      s.history.output_counts[res.token]++;
      if (static_cast<int>(out[i].tokens.size()) >= r.max_tokens) {
        out[i].finish = FinishReason::kLength;
        s.done = true;
      }
    }
    for (auto& s : seqs) {
      if (s.done && !s.table.empty()) SPAR_RETURN_IF_ERROR(allocator_.Release(&s.table));
    }
  }
  return out;
}

}  // namespace spar
