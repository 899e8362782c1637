#include "services/scheduler/scheduler.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/log.h"
#include "services/common/status_field.h"
#include "services/scheduler/block_ledger.h"

namespace spar {

Scheduler::Scheduler(SchedulerOptions options, ModelConfig config, std::unique_ptr<Tokenizer> tokenizer,
                     std::unique_ptr<Pipeline> pipeline)
    : options_(std::move(options)),
      config_(std::move(config)),
      tokenizer_(std::move(tokenizer)),
      pipeline_(std::move(pipeline)),
      tracker_(tokenizer_.get(), options_.observer) {
  limits_.vocab_size = config_.vocab_size;
  limits_.max_model_len = options_.max_model_len > 0 ? options_.max_model_len : config_.max_position_embeddings;
  limits_.served_model_name = options_.served_model_name;
  limits_.max_n = options_.max_n;
}

Scheduler::~Scheduler() { Stop(); }

absl::Status Scheduler::ConnectOnce(absl::Duration timeout) {
  Pipeline::Callbacks cb;
  cb.on_result = [this](MicroBatchResult r) { OnResult(std::move(r)); };
  cb.on_failure = [this](absl::Status s) { OnFailure(std::move(s)); };
  auto info = pipeline_->Connect(std::move(cb), timeout);
  if (info.ok() && options_.limits.num_speculative_tokens > info->num_speculative_tokens) {
    pipeline_->Close();  // not under mu_: its threads' callbacks take it
    info = absl::FailedPreconditionError(absl::StrCat(
        "--num-speculative-tokens ", options_.limits.num_speculative_tokens, ", but the last stage verifies at most ",
        info->num_speculative_tokens,
        " drafts per step (start its worker with --num-speculative-tokens on a model with an MTP layer)"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!info.ok()) return info.status();
  if (stopping_) return absl::UnavailableError("the scheduler is shutting down");
  pipeline_info_ = *info;
  CoreOptions co;
  co.num_blocks = info->num_blocks;
  co.limits = options_.limits;
  co.max_in_flight = options_.max_in_flight > 0 ? options_.max_in_flight : info->num_stages;
  co.max_waiting = options_.max_waiting;
  co.max_model_len = limits_.max_model_len;
  co.eos_token_ids = config_.eos_token_ids;
  co.balance = options_.balance;
  co.enable_prefix_caching = options_.enable_prefix_caching;
  // A block's content depends on the model and on the formats the stages
  // store it in, besides its tokens (the salt roots every key). A new
  // connection starts a new core, so nothing cached survives a reconnect:
  // the stages' caches are treated as lost then.
  co.prefix_cache_salt = absl::StrCat("model_type=", config_.model_type, "\nmodel=", options_.model_path,
                                      "\nstages=", FormatStageLayers(info->stage_layers),
                                      "\ncache_dtypes=", absl::StrJoin(info->cache_dtypes, ","));
  if (core_) AccumulateCounters(core_->Stats(), &before_);
  core_ = std::make_unique<SchedulerCore>(co);
  ready_ = true;
  reconnect_ = false;
  SPAR_LOG(INFO) << "scheduler ready: " << info->num_stages << " stages, " << co.max_in_flight
                 << " micro-batches in flight, " << co.limits.max_batch_tokens << " tokens per micro-batch, prefix caching "
                 << (co.enable_prefix_caching ? "on" : "off") << ", caches " << absl::StrJoin(info->cache_dtypes, ",")
                 << ", speculative tokens " << co.limits.num_speculative_tokens;
  return absl::OkStatus();
}

absl::Status Scheduler::Start() {
  absl::Status s = ConnectOnce(options_.connect_timeout);
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return absl::UnavailableError("the scheduler is shutting down");
  if (!s.ok()) reconnect_ = true;
  loop_ = std::thread([this] { Loop(); });
  return s;
}

void Scheduler::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    ready_ = false;
    FailLocked(absl::UnavailableError("the scheduler is shutting down"));
  }
  cv_.notify_all();
  pipeline_->Shutdown();  // a Connect in progress (Start or the loop) gives up
  // loop_ is only assigned under mu_ while !stopping_: stable from here on.
  if (loop_.joinable()) loop_.join();
}

void Scheduler::HandleLocked(const std::vector<SeqEvent>& events) {
  if (events.empty()) return;
  for (int64_t seq : tracker_.Apply(events)) core_->Finish(seq);
}

void Scheduler::PumpLocked() {
  if (!ready_ || !core_) return;
  const absl::Time now = absl::Now();
  while (auto plan = core_->NextMicroBatch(now)) {
    if (options_.observer != nullptr) {
      for (const PlannedSequence& p : plan->seqs) {
        if (const std::string* request = tracker_.RequestOf(p.step.seq_id)) options_.observer->OnScheduled(*request);
      }
    }
    pipeline_->Send(std::move(*plan));
  }
}

void Scheduler::FailLocked(const absl::Status& status) {
  if (core_) HandleLocked(core_->FailAll(status));
  for (int64_t seq : tracker_.EndAll(status)) {
    if (core_) core_->Finish(seq);
  }
}

void Scheduler::OnResult(MicroBatchResult result) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!core_ || stopping_) return;
  HandleLocked(core_->OnResult(result));
  PumpLocked();
}

void Scheduler::OnFailure(absl::Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    ready_ = false;
    reconnect_ = true;
    FailLocked(absl::UnavailableError(absl::StrCat("pipeline failure: ", status.message())));
  }
  cv_.notify_all();
}

absl::StatusOr<std::string> Scheduler::Submit(GenerateParams params, std::shared_ptr<GenerationSink> sink) {
  auto id = SubmitAdmitted(std::move(params), std::move(sink));
  if (!id.ok() && options_.observer != nullptr) options_.observer->OnRejected(id.status().code());
  return id;
}

absl::StatusOr<std::vector<int32_t>> Scheduler::EncodePrompt(const std::string& text, size_t enough) const {
  // Stops once the text is known to encode to more than `enough` ids (the
  // context): a 15 MiB prompt against a 32K context costs what its first
  // ~32K tokens cost, not the whole text (text/tokenizer.h EncodeOptions).
  return tokenizer_->Encode(text, EncodeOptions{.allow_special = true, .max_tokens = enough});
}

absl::StatusOr<std::string> Scheduler::SubmitAdmitted(GenerateParams params, std::shared_ptr<GenerationSink> sink) {
  std::vector<int32_t> prompt = std::move(params.prompt_ids);
  if (params.text) {
    if (tokenizer_ == nullptr) {
      return WithField(absl::InvalidArgumentError(absl::StrCat(params.prompt_field,
                                                               ": this server has no tokenizer.json; send token ids")),
                       params.prompt_field);
    }
    // A raw prompt: special tokens written in it are recognized (chat
    // templates are applied by the caller or the OpenAI layer).
    auto ids = EncodePrompt(*params.text, static_cast<size_t>(limits_.max_model_len));
    const std::string& field = params.prompt_field;
    if (!ids.ok()) return WithField(absl::InvalidArgumentError(absl::StrCat(field, ": ", ids.status().message())), field);
    prompt = std::move(*ids);
    if (prompt.empty()) return WithField(absl::InvalidArgumentError(absl::StrCat(field, " encodes to no tokens")), field);
    for (int32_t id : prompt) {
      if (id < 0 || id >= config_.vocab_size) {
        return WithField(absl::InvalidArgumentError(absl::StrCat(field, " encodes to token id ", id,
                                                                 ", outside the model's vocabulary of ",
                                                                 config_.vocab_size)),
                         field);
      }
    }
  }
  const int64_t len = static_cast<int64_t>(prompt.size());
  const int64_t context = limits_.max_model_len;
  if (len >= context) {
    // A text prompt's encoding stops past the context: its count is a bound.
    const bool stopped_early = params.text.has_value() && len > context;
    return WithField(absl::InvalidArgumentError(absl::StrCat(params.prompt_field, ": the prompt has ",
                                                             stopped_early ? "more than " : "",
                                                             stopped_early ? context : len,
                                                             " tokens, leaving no room in the context of ", context)),
                     params.prompt_field);
  }
  const int max_tokens = params.max_tokens ? *params.max_tokens : static_cast<int>(context - len);
  if (len + max_tokens > context) {
    return WithField(absl::InvalidArgumentError(absl::StrCat(params.max_tokens_field, ": the prompt (", len,
                                                             " tokens) + max_tokens (", max_tokens,
                                                             ") exceeds the context length of ", context)),
                     params.max_tokens_field);
  }
  uint64_t seed;
  if (params.seed) {
    seed = *params.seed;
  } else {
    std::random_device rd;
    seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  std::vector<SequenceRequest> seqs(params.n);
  for (int i = 0; i < params.n; ++i) {
    SequenceRequest& r = seqs[i];
    r.prompt = prompt;
    r.sampling = params.sampling;
    r.sampling.seed = seed + static_cast<uint64_t>(i);
    r.top_logprobs = params.top_logprobs;
    r.max_tokens = max_tokens;
    r.stop_token_ids = params.stop_token_ids;
    r.ignore_eos = params.ignore_eos;
    r.deadline = params.deadline;
    r.constraint = params.constraint;
  }

  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return absl::UnavailableError("the scheduler is shutting down");
  if (draining_) return absl::UnavailableError("the server is draining (shutting down): retry on another replica");
  if (!ready_ || !core_) return absl::UnavailableError("not ready: the pipeline of workers is not connected");
  std::string id = params.request_id;
  if (id.empty()) {
    do {
      id = absl::StrCat("req-", next_request_++);
    } while (tracker_.Contains(id));
  } else if (tracker_.Contains(id)) {
    return absl::AlreadyExistsError(absl::StrCat("request_id \"", id, "\" is already in use by an active request"));
  }
  auto ids = core_->Submit(std::move(seqs));
  if (!ids.ok()) {
    // RESOURCE_EXHAUSTED is either "queue full, retry later" or "this
    // request can never fit the KV cache"; the field tells a client (and
    // the HTTP API: 429 vs 400) that retrying the same request is useless.
    if (ids.status().code() == absl::StatusCode::kResourceExhausted &&
        BlockLedger::BlocksFor(len + max_tokens) > core_->Stats().total_blocks) {
      return WithField(ids.status(), params.max_tokens ? params.max_tokens_field : params.prompt_field);
    }
    return ids.status();
  }
  tracker_.Add(id, params, std::move(prompt), *ids, std::move(sink));
  PumpLocked();
  return id;
}

std::vector<std::string> Scheduler::Abort(const std::vector<std::string>& request_ids) {
  std::vector<std::string> found;
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& id : request_ids) {
    if (!tracker_.Contains(id)) continue;
    for (int64_t seq : tracker_.End(id, absl::CancelledError(absl::StrCat("request ", id, " was aborted")))) {
      if (core_) core_->Finish(seq);
    }
    found.push_back(id);
  }
  PumpLocked();
  return found;
}

void Scheduler::Cancel(const std::string& request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!tracker_.Contains(request_id)) return;
  for (int64_t seq : tracker_.End(request_id, absl::CancelledError("the client cancelled the call"))) {
    if (core_) core_->Finish(seq);
  }
  PumpLocked();
}

void Scheduler::Loop() {
  absl::Time next_reconnect = absl::Now() + options_.reconnect_interval;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, std::chrono::milliseconds(20));
    if (stopping_) break;
    absl::Time now = absl::Now();
    if (reconnect_ && now >= next_reconnect) {
      lock.unlock();
      absl::Status s = ConnectOnce(options_.reconnect_timeout);
      lock.lock();
      if (!s.ok()) {
        SPAR_LOG(WARNING) << "pipeline not connected: " << s;
        next_reconnect = absl::Now() + options_.reconnect_interval;
      }
      continue;
    }
    if (!core_ || !ready_) continue;
    HandleLocked(core_->ExpireDeadlines(now));
    if (core_->HasInFlightOlderThan(now - options_.step_timeout)) {
      ready_ = false;
      reconnect_ = true;
      next_reconnect = now;
      FailLocked(absl::UnavailableError(absl::StrCat("a micro-batch did not come back from the pipeline within ",
                                                     absl::FormatDuration(options_.step_timeout))));
      continue;
    }
    PumpLocked();
  }
}

LoadInfo Scheduler::Load() const {
  std::lock_guard<std::mutex> lock(mu_);
  LoadInfo l;
  l.ready = ready_;
  l.draining = draining_;
  l.active_requests = tracker_.size();
  l.max_waiting = options_.max_waiting;
  l.prefix_caching = options_.enable_prefix_caching;
  l.cache_dtype = absl::StrJoin(pipeline_info_.cache_dtypes, ",");
  if (core_) {
    l.core = core_->Stats();
    l.running_requests = static_cast<int>(l.core.running);
    l.waiting_requests = static_cast<int>(l.core.waiting);
  }
  AccumulateCounters(before_, &l.core);
  return l;
}

ModelInfo Scheduler::Info() const {
  std::lock_guard<std::mutex> lock(mu_);
  ModelInfo m;
  m.served_model_name = options_.served_model_name;
  m.model_path = options_.model_path;
  m.model_type = config_.model_type;
  m.architectures = config_.architectures;
  m.vocab_size = config_.vocab_size;
  m.max_model_len = limits_.max_model_len;
  m.eos_token_ids = config_.eos_token_ids;
  m.bos_token_id = config_.bos_token_id;
  m.stages = pipeline_info_.num_stages;
  m.total_blocks = pipeline_info_.num_blocks;
  m.max_batch_tokens = options_.limits.max_batch_tokens;
  m.max_running = options_.limits.max_running;
  m.has_tokenizer = tokenizer_ != nullptr;
  return m;
}

bool Scheduler::ready() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ready_ && !draining_;
}

bool Scheduler::draining() const {
  std::lock_guard<std::mutex> lock(mu_);
  return draining_;
}

void Scheduler::BeginDrain() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!draining_) SPAR_LOG(INFO) << "draining: " << tracker_.size() << " active requests, refusing new ones";
  draining_ = true;
}

bool Scheduler::WaitUntilIdle(absl::Duration timeout) {
  const absl::Time until = absl::Now() + timeout;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (tracker_.size() == 0) return true;
    const absl::Time now = absl::Now();
    if (now >= until) return false;
    // Requests end on pipeline threads, which do not signal this wait: poll
    // (a drain lasts seconds; 20 ms of lag does not matter).
    cv_.wait_for(lock, std::chrono::milliseconds(std::min<int64_t>(20, absl::ToInt64Milliseconds(until - now) + 1)));
  }
}

}  // namespace spar
