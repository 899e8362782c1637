#include "services/worker/worker_runtime.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "services/common/worker_convert.h"
#include "services/worker/activation_codec.h"

namespace spar {

WorkerRuntime::WorkerRuntime(WorkerOptions options)
    : options_(std::move(options)), group_(options_.tp, options_.host, &mu_, this) {
  window_start_ = absl::Now();
  metrics_stage_ = options_.stage_index;
}

WorkerRuntime::~WorkerRuntime() { Stop(); }

void WorkerRuntime::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    // A formation in progress gives up: waits for peers, the rendezvous,
    // the calls to the peers.
    group_.StopLocked();
  }
  group_.CloseMembership();
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::deque<Task> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(tasks_);
  }
  // Answer Configure calls that never ran, so their RPCs finish.
  for (Task& t : left) {
    if (t.kind == Task::kConfigure && t.done) t.done(absl::UnavailableError("worker is shutting down"));
  }
  downstream_.reset();
  group_.ClosePeerLinks();
}

void WorkerRuntime::Start(std::function<void(bool)> on_ready_change) {
  on_ready_change_ = std::move(on_ready_change);
  if (options_.preload && tp_leader()) {
    // A group loads together: form it as soon as every peer has joined.
    group_.FormWhenComplete(options_.stage);
  } else if (options_.preload && !tp_peer()) {  // a peer loads when its leader configures it
    Task t;
    t.kind = Task::kLoad;
    Push(std::move(t));
  }
  thread_ = std::thread([this] { Run(); });
}

void WorkerRuntime::Push(Task task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      tasks_.push_back(std::move(task));
    } else if (task.kind == Task::kConfigure) {
      task.done(absl::UnavailableError("worker is shutting down"));
    }
  }
  cv_.notify_one();
}

void WorkerRuntime::Configure(v1::ConfigureRequest request, ConfigureDone done) {
  Task t;
  t.kind = Task::kConfigure;
  t.configure = std::move(request);
  t.done = std::move(done);
  Push(std::move(t));
}

void WorkerRuntime::Enqueue(std::unique_ptr<v1::MicroBatch> batch) {
  Task t;
  t.kind = Task::kBatch;
  t.batch = std::move(batch);
  t.arrived = absl::Now();
  Push(std::move(t));
}

void WorkerRuntime::Run() {
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      executing_ = false;
      cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (stopping_) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
      executing_ = true;
    }
    switch (task.kind) {
      case Task::kLoad:
        if (absl::Status s = Load(options_.stage); !s.ok()) {
          SPAR_LOG(ERROR) << "loading the shard failed: " << s;
          std::lock_guard<std::mutex> lock(mu_);
          fatal_ = s;
        }
        break;
      case Task::kConfigure: {
        auto info = DoConfigure(task.configure);
        if (!info.ok()) SPAR_LOG(WARNING) << "configure failed: " << info.status();
        task.done(std::move(info));
        break;
      }
      case Task::kBatch:
        DoBatch(std::move(task.batch), task.arrived);
        break;
      case Task::kFormGroup:
        group_.FormQueued();
        break;
    }
  }
}

absl::Status WorkerRuntime::Load(const StageOptions& options, bool announce) {
  const absl::Time start = absl::Now();
  SPAR_LOG(INFO) << "loading layers [" << options.first_layer << ", "
                 << (options.last_layer < 0 ? std::string("end") : std::to_string(options.last_layer)) << ") of "
                 << options.model_dir << " (" << options.num_blocks << " KV blocks, " << options.backend << ")";
  SPAR_ASSIGN_OR_RETURN(auto exec, StageExecutor::Load(options));
  {
    std::lock_guard<std::mutex> lock(mu_);
    group_.SetBackendLocked(nullptr);  // the old executor dies below
  }
  exec_ = std::move(exec);
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A lost member aborts this backend's collectives.
    group_.SetBackendLocked(exec_->backend());
    // A rank of a TP group is usable once the whole group is (FormGroup,
    // ConfigureAsPeer say so).
    if (announce) loaded_ = true;
    last_stage_ = exec_->is_last_stage();
    shard_.set_model_path(options.model_dir);
    shard_.set_first_layer(exec_->first_layer());
    shard_.set_last_layer(exec_->last_layer());
    shard_.set_num_blocks(exec_->options().num_blocks);
    shard_.set_backend(options.backend);
    shard_.set_kv_cache_dtype(LatentFormatName(exec_->cache_formats().latent));
    shard_.set_indexer_cache_dtype(IndexerFormatName(exec_->cache_formats().indexer));
    shard_.mutable_tp()->set_rank(options_.tp.rank);
    shard_.mutable_tp()->set_size(options_.tp.size);
    shard_.mutable_tp()->set_group_id(group_.group_id_locked());
    num_model_layers_ = exec_->config().num_hidden_layers;
    memory_ = exec_->device_memory();
    hidden_size_ = exec_->config().hidden_size;
    num_speculative_tokens_ = exec_->is_last_stage() ? exec_->num_speculative_tokens() : 0;
    vocab_size_ = exec_->config().vocab_size;
  }
  SPAR_LOG(INFO) << "loaded layers [" << exec_->first_layer() << ", " << exec_->last_layer() << ") in "
                 << absl::FormatDuration(absl::Now() - start);
  if (announce && on_ready_change_) on_ready_change_(true);
  return absl::OkStatus();
}

absl::StatusOr<v1::WorkerInfo> WorkerRuntime::DoConfigure(const v1::ConfigureRequest& r) {
  if (tp_peer()) {
    // From this peer's leader (the scheduler talks to leaders only); epoch
    // 0 when the leader forms its group before any scheduler configured it.
    SPAR_RETURN_IF_ERROR(group_.ConfigureAsPeer(r));
    std::lock_guard<std::mutex> lock(mu_);
    epoch_ = r.epoch();
    stage_index_ = r.stage_index();
    metrics_stage_ = r.stage_index();
    num_stages_ = r.num_stages();
    return InfoLocked();
  }
  if (r.epoch() == 0) return absl::InvalidArgumentError("configure: epoch must be > 0");
  if (r.num_stages() < 1 || r.stage_index() < 0 || r.stage_index() >= r.num_stages()) {
    return absl::InvalidArgumentError(
        absl::StrCat("configure: stage_index ", r.stage_index(), " is outside [0, num_stages = ", r.num_stages(), ")"));
  }
  const v1::ShardSpec& want = r.shard();
  if (want.tp().size() != 0 && want.tp().size() != options_.tp.size) {
    return absl::FailedPreconditionError(absl::StrCat("configure: the scheduler expects a tensor-parallel size of ",
                                                      want.tp().size(), ", this stage runs ", options_.tp.size));
  }
  if (tp_leader() && (exec_ == nullptr || group_.Stale())) {
    SPAR_ASSIGN_OR_RETURN(StageOptions so, ResolveShard(want));
    if (exec_ != nullptr) {  // a group that lost a member re-forms on the shard it holds
      so.first_layer = exec_->first_layer();
      so.last_layer = exec_->last_layer();
    }
    SPAR_RETURN_IF_ERROR(group_.Form(so, r));
  } else if (exec_ == nullptr) {
    SPAR_ASSIGN_OR_RETURN(StageOptions so, ResolveShard(want));
    SPAR_RETURN_IF_ERROR(Load(so));
  } else if (tp_leader()) {
    SPAR_RETURN_IF_ERROR(group_.ConfigurePeers(r));
  }
  if (want.first_layer() != exec_->first_layer() || want.last_layer() != exec_->last_layer()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "configure: shard mismatch: this worker holds layers [", exec_->first_layer(), ", ", exec_->last_layer(),
        "), the scheduler expects [", want.first_layer(), ", ", want.last_layer(), ") for stage ", r.stage_index()));
  }
  int64_t held_blocks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    held_blocks = shard_.num_blocks();  // a group's: the fewest any rank has
  }
  if (want.num_blocks() > held_blocks) {
    return absl::FailedPreconditionError(absl::StrCat("configure: the scheduler needs ", want.num_blocks(),
                                                      " KV blocks, this stage has ", held_blocks));
  }
  if (!want.backend().empty() && want.backend() != exec_->options().backend) {
    return absl::FailedPreconditionError(absl::StrCat("configure: the scheduler expects backend ", want.backend(),
                                                      ", this worker runs ", exec_->options().backend));
  }
  const bool last = exec_->is_last_stage();
  if (last != r.next_stage_address().empty()) {
    return absl::InvalidArgumentError(
        last ? "configure: the last stage has no next stage, but next_stage_address is set"
             : "configure: next_stage_address is required (this worker is not the last stage)");
  }
  // A new epoch: per-sequence state and undelivered results of the old one
  // are meaningless (the scheduler treats the caches as lost).
  exec_->ResetSequences();
  results_.Reset();
  downstream_.reset();
  if (!last) {
    Downstream::SentCallback on_sent;
    if (WorkerMetrics* metrics = options_.metrics) {
      const int stage = r.stage_index();
      on_sent = [metrics, stage](absl::Duration d, uint64_t bytes) { metrics->OnActivationsSent(stage, d, bytes); };
    }
    downstream_ = std::make_unique<Downstream>(r.next_stage_address(), std::move(on_sent));
  }
  if (tp_leader()) group_.RememberConfigure(r);
  std::lock_guard<std::mutex> lock(mu_);
  epoch_ = r.epoch();
  stage_index_ = r.stage_index();
  metrics_stage_ = r.stage_index();
  num_stages_ = r.num_stages();
  next_address_ = r.next_stage_address();
  SPAR_LOG(INFO) << "configured as stage " << stage_index_ << " of " << num_stages_ << " (epoch " << epoch_ << ")"
                 << (last ? "" : absl::StrCat(", next stage at ", next_address_));
  return InfoLocked();
}

absl::StatusOr<StageOutput> WorkerRuntime::ExecuteBatch(const v1::MicroBatch& batch) {
  if (exec_ == nullptr) return absl::FailedPreconditionError("this worker has not loaded its shard");
  SPAR_ASSIGN_OR_RETURN(MicroBatchPlan plan, PlanFromProto(batch));
  Activations in;
  if (!exec_->is_first_stage() && !plan.seqs.empty()) {
    SPAR_RETURN_IF_ERROR(DecodeActivation(batch.hidden(), &in));
  }
  return exec_->Execute(plan, std::move(in));
}

void WorkerRuntime::DoBatch(std::unique_ptr<v1::MicroBatch> batch, absl::Time arrived) {
  const absl::Time start = absl::Now();
  uint64_t epoch;
  int stage;
  bool tp_broken;
  absl::Status tp_reason;
  {
    std::lock_guard<std::mutex> lock(mu_);
    epoch = epoch_;
    stage = stage_index_;
    tp_broken = group_.broken_locked();
    tp_reason = group_.broken_reason_locked();
  }
  WorkerMetrics* metrics = options_.metrics;
  if (metrics) metrics->OnMicroBatchStart(stage, start);
  const size_t bytes_in = batch->hidden().data().size();
  const bool batch_failed = batch->has_error();  // failed upstream: passed on, not executed
  absl::Status status;
  StageOutput out;
  if (tp_broken && !batch->has_error()) {
    // What a lost worker means to the requests: UNAVAILABLE, retry.
    status = absl::UnavailableError(absl::StrCat("this stage's tensor-parallel group lost a member (",
                                                 tp_reason.message(), "); it re-forms when the member is back"));
  } else if (batch->epoch() != epoch) {
    status = absl::FailedPreconditionError(absl::StrCat("micro-batch of epoch ", batch->epoch(),
                                                        " reached a stage configured for epoch ", epoch));
  } else if (!batch->has_error()) {
    // Every rank of the group executes the same micro-batch (the leader
    // first hands it to its peers, which compute in the same order).
    group_.SendToPeers(*batch);
    auto r = ExecuteBatch(*batch);
    if (r.ok()) {
      out = std::move(*r);
    } else {
      status = r.status();
      SPAR_LOG(WARNING) << "micro-batch " << batch->batch_id() << " failed: " << status;
    }
  }
  const absl::Time end = absl::Now();
  v1::StageTiming timing;
  timing.set_stage(stage);
  timing.set_queue_ns(absl::ToInt64Nanoseconds(start - arrived));
  timing.set_compute_ns(absl::ToInt64Nanoseconds(end - start));
  int64_t tokens = 0;
  for (const auto& s : batch->seqs()) tokens += s.tokens_size();
  size_t bytes_out = 0;

  const bool last = exec_ != nullptr && exec_->is_last_stage();
  if (tp_peer()) {
    // Only the leader publishes or forwards; its own execution of this
    // micro-batch reports any failure (a peer's failure breaks the leader's
    // all-reduce too).
  } else if (last) {
    v1::MicroBatchResult result;
    result.set_epoch(batch->epoch());
    result.set_batch_id(batch->batch_id());
    if (batch->has_error()) {
      *result.mutable_error() = batch->error();
    } else if (!status.ok()) {
      ErrorToProto(status, stage, result.mutable_error());
    } else {
      MicroBatchResult domain;
      domain.id = batch->batch_id();
      domain.tokens = std::move(out.tokens);
      domain.speculation = std::move(out.speculation);
      ResultToProto(domain, batch->epoch(), &result);
    }
    *result.mutable_timings() = batch->timings();
    *result.add_timings() = timing;
    results_.Publish(std::move(result));
  } else if (downstream_ != nullptr) {
    batch->clear_hidden();
    if (!status.ok() && !batch->has_error()) {
      ErrorToProto(status, stage, batch->mutable_error());
    } else if (status.ok() && !batch->has_error()) {
      bytes_out = EncodeActivation(out.hidden, batch->mutable_hidden());
    }
    *batch->add_timings() = timing;
    downstream_->Send(std::move(batch));
  } else {
    SPAR_LOG(ERROR) << "micro-batch " << batch->batch_id() << " dropped: this stage is not configured ("
                    << (status.ok() ? "no next stage" : std::string(status.message())) << ")";
  }

  if (metrics) {
    MicroBatchObservation o;
    o.stage = stage;
    o.start = start;
    o.end = end;
    o.queued = start - arrived;
    o.forward = out.timings.forward;
    o.sampling = out.timings.sampling;
    o.allreduce = out.timings.allreduce;
    o.tokens = tokens;
    o.bytes_in = bytes_in;
    o.ok = status.ok();
    o.executed = status.ok() && !batch_failed && tokens > 0;
    metrics->OnMicroBatch(o);
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++micro_batches_;
  tokens_ += tokens;
  busy_ns_ += absl::ToInt64Nanoseconds(end - start);
  bytes_in_ += bytes_in;
  bytes_out_ += bytes_out;
  sampling_states_ = exec_ ? exec_->num_sampling_states() : 0;
}

absl::StatusOr<StageOptions> WorkerRuntime::ResolveShard(const v1::ShardSpec& want) const {
  StageOptions so = options_.stage;
  if (so.model_dir.empty()) so.model_dir = want.model_path();
  if (so.model_dir.empty()) {
    return absl::FailedPreconditionError("configure: the worker has no model (--model) and shard.model_path is empty");
  }
  so.first_layer = want.first_layer();
  so.last_layer = want.last_layer();
  if (want.num_blocks() > 0) so.num_blocks = want.num_blocks();
  if (!want.backend().empty()) so.backend = want.backend();
  // A peer allocates its leader's cache formats.
  if (!want.kv_cache_dtype().empty()) {
    SPAR_ASSIGN_OR_RETURN(so.cache_dtypes.latent, ParseKvCacheDtype(want.kv_cache_dtype()));
  }
  if (!want.indexer_cache_dtype().empty()) {
    SPAR_ASSIGN_OR_RETURN(so.cache_dtypes.indexer, ParseIndexerCacheDtype(want.indexer_cache_dtype()));
  }
  return so;
}

bool WorkerRuntime::SetUnreadyLocked(bool end_epoch) {
  if (end_epoch) epoch_ = 0;
  const bool was_loaded = loaded_;
  loaded_ = false;
  return was_loaded;
}

void WorkerRuntime::SetReadyLocked(uint64_t group_id, int64_t max_blocks) {
  loaded_ = true;
  shard_.mutable_tp()->set_group_id(group_id);
  shard_.set_num_blocks(std::min<int64_t>(shard_.num_blocks(), max_blocks));
}

void WorkerRuntime::ReadyChanged(bool ready) {
  if (on_ready_change_) on_ready_change_(ready);
}

void WorkerRuntime::QueueFormation() {
  Task t;
  t.kind = Task::kFormGroup;
  Push(std::move(t));
}

v1::WorkerInfo WorkerRuntime::InfoLocked() const {
  v1::WorkerInfo info;
  *info.mutable_shard() = shard_;
  if (!loaded_) {
    info.mutable_shard()->set_model_path(options_.stage.model_dir);
    info.mutable_shard()->set_num_blocks(options_.stage.num_blocks);
    info.mutable_shard()->set_backend(options_.stage.backend);
    info.mutable_shard()->mutable_tp()->set_rank(options_.tp.rank);
    info.mutable_shard()->mutable_tp()->set_size(options_.tp.size);
  }
  info.set_loaded(loaded_);
  info.set_epoch(epoch_);
  info.set_stage_index(stage_index_);
  info.set_num_stages(num_stages_);
  info.set_num_model_layers(num_model_layers_);
  info.set_hidden_size(hidden_size_);
  info.set_vocab_size(vocab_size_);
  // What this stage's hidden states travel as (EncodeActivation): the cuda
  // backend's are bf16 values, the cpu backend's fp32.
  info.set_activation_dtype(shard_.backend() == "cpu" ? v1::ACTIVATION_DTYPE_F32 : v1::ACTIVATION_DTYPE_BF16);
  info.set_next_stage_address(next_address_);
  info.set_num_speculative_tokens(loaded_ ? num_speculative_tokens_ : options_.stage.num_speculative_tokens);
  return info;
}

v1::WorkerInfo WorkerRuntime::Info() const {
  std::lock_guard<std::mutex> lock(mu_);
  return InfoLocked();
}

v1::WorkerStats WorkerRuntime::Stats(bool reset) {
  std::lock_guard<std::mutex> lock(mu_);
  v1::WorkerStats s;
  const absl::Time now = absl::Now();
  s.set_micro_batches(micro_batches_);
  s.set_tokens(tokens_);
  s.set_busy_ns(busy_ns_);
  s.set_window_ns(absl::ToInt64Nanoseconds(now - window_start_));
  int queued = 0;
  for (const Task& t : tasks_) queued += t.kind == Task::kBatch;
  s.set_queue_depth(queued);
  s.set_sampling_states(static_cast<int32_t>(sampling_states_));
  s.set_activation_bytes_in(bytes_in_);
  s.set_activation_bytes_out(bytes_out_);
  if (reset) {
    window_start_ = now;
    micro_batches_ = tokens_ = bytes_in_ = bytes_out_ = 0;
    busy_ns_ = 0;
  }
  return s;
}

WorkerGauges WorkerRuntime::Gauges() const {
  std::lock_guard<std::mutex> lock(mu_);
  WorkerGauges g;
  g.stage = metrics_stage_;
  g.loaded = loaded_;
  g.first_layer = shard_.first_layer();
  g.last_layer = shard_.last_layer();
  g.backend = loaded_ ? shard_.backend() : options_.stage.backend;
  for (const Task& t : tasks_) g.queue_depth += t.kind == Task::kBatch;
  g.sampling_states = static_cast<int64_t>(sampling_states_);
  g.weights_bytes = memory_.weights_bytes;
  g.kv_cache_bytes = memory_.kv_cache_bytes;
  return g;
}

void WorkerRuntime::UpstreamOpened() {
  std::lock_guard<std::mutex> lock(mu_);
  ++open_upstreams_;
}

void WorkerRuntime::UpstreamClosed() {
  std::lock_guard<std::mutex> lock(mu_);
  --open_upstreams_;
}

bool WorkerRuntime::Idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_upstreams_ <= 0 && tasks_.empty() && !executing_;
}

uint64_t WorkerRuntime::epoch() const {
  std::lock_guard<std::mutex> lock(mu_);
  return epoch_;
}

bool WorkerRuntime::is_last_stage() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_stage_;
}

absl::Status WorkerRuntime::fatal_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fatal_;
}

}  // namespace spar
