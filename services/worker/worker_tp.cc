// WorkerRuntime's tensor-parallel group (DESIGN.md §1): a stage is T worker
// processes; the leader (rank 0) is the only one the scheduler and the
// neighbouring stages see.
//
// - Membership: peers hold a JoinTpGroup stream open to the leader
//   (TpJoiner → TpMembership); a stream that ends is a lost member.
// - Formation (the leader's Configure, or on its own once every peer is
//   back): the leader makes the rendezvous (an ncclUniqueId, or a cpu
//   SocketGroup port + secret), configures every peer with it in parallel
//   while it loads and joins itself (NCCL's set-up and the socket
//   rendezvous are collective), then opens a Pipeline stream to each peer.
// - Per micro-batch: the leader sends it (plan + hidden) to every peer, all
//   ranks run the same forward with all-reduces between them, and only the
//   leader forwards or publishes.
// - Loss: the stage turns not-ready and drops its epoch (the scheduler's
//   monitor then fails the pipeline: its requests end UNAVAILABLE), a
//   blocked all-reduce fails at once, and the group re-forms when the
//   member returns.
//
// The micro-batches reach the peers over gRPC, not an NCCL broadcast: the
// plan is host data that must travel anyway, ordering is that of one stream
// per peer, and the same path serves the cpu backend; for the cuda backend
// the hidden states cross the loopback once per peer (a decode step's
// [batch x 6144] is small; a 4096-token prefill chunk is ~100 MB of fp32
// today, a cost to revisit with bf16 transfers or a broadcast).
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "engine/engine.h"
#include "services/common/daemon.h"
#include "services/common/grpc_status.h"
#include "services/worker/worker_runtime.h"

namespace spar {
namespace {

// The host of "host:port" (brackets of an IPv6 literal removed).
std::string HostOf(const std::string& address) {
  std::string host = address.substr(0, address.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host;
}

}  // namespace

void WorkerRuntime::StartTpJoin(int port) {
  if (!tp_peer()) return;
  v1::JoinTpGroupRequest request;
  request.set_tp_rank(options_.tp_rank);
  request.set_tp_size(options_.tp_size);
  request.set_leader_address(options_.tp_leader);
  request.set_host(options_.tp_host);
  request.set_port(port);
  TpJoiner::Callbacks callbacks;
  callbacks.on_left = [this](const absl::Status& why) {
    BreakGroup(absl::UnavailableError(absl::StrCat("the stage leader at ", options_.tp_leader, " went away: ",
                                                   why.message())));
  };
  joiner_ = std::make_unique<TpJoiner>(options_.tp_leader, std::move(request), std::move(callbacks));
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
  return so;
}

void WorkerRuntime::DropGroup(bool keep_shard) {
  peer_links_.clear();  // closes the streams to the peers
  std::shared_ptr<SocketGroup> group;
  bool was_loaded;
  {
    std::lock_guard<std::mutex> lock(mu_);
    group = std::move(socket_group_);
    socket_group_.reset();
    group_id_ = 0;
    was_loaded = loaded_;
    loaded_ = false;
  }
  // Ranks still blocked in the old group's all-reduce fail now.
  if (group) group->Break(absl::UnavailableError("the tensor-parallel group is re-forming"));
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The group is over for every rank: its communicator is aborted, not
    // destroyed (an orderly destroy may wait on a rank that is gone).
    if (abortable_backend_ != nullptr) abortable_backend_->AbortCollectives();
    abortable_backend_ = nullptr;
  }
  if (!keep_shard) exec_.reset();  // memory first: a new formation loads again
  if (was_loaded && on_ready_change_) on_ready_change_(false);
}

bool WorkerRuntime::CanRejoin(const StageOptions& so) const {
  if (exec_ == nullptr || options_.tp_size == 1) return false;
  const StageOptions& have = exec_->options();
  return have.model_dir == so.model_dir && have.backend == so.backend && exec_->first_layer() == so.first_layer &&
         (so.last_layer < 0 || exec_->last_layer() == so.last_layer);
}

absl::Status WorkerRuntime::Rejoin(const StageOptions& so) {
  const absl::Time start = absl::Now();
  SPAR_RETURN_IF_ERROR(exec_->backend()->RejoinGroup(Backend::TpRendezvous{so.nccl_unique_id, so.cpu_group}));
  // Cached sequences belong to the old group's epoch.
  exec_->ResetSequences();
  {
    std::lock_guard<std::mutex> lock(mu_);
    abortable_backend_ = exec_->backend();
  }
  SPAR_LOG(INFO) << "rejoined a tensor-parallel group as rank " << options_.tp_rank << " in "
                 << absl::FormatDuration(absl::Now() - start) << ", keeping the loaded layers";
  return absl::OkStatus();
}

bool WorkerRuntime::GroupStale() const {
  std::lock_guard<std::mutex> lock(mu_);
  return group_id_ == 0 || tp_broken_ || membership_->version() != formed_version_;
}

void WorkerRuntime::BreakGroup(const absl::Status& why) {
  std::shared_ptr<SocketGroup> group;
  bool was_loaded;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (group_id_ == 0 || tp_broken_) return;  // nothing formed, or already broken
    tp_broken_ = true;
    tp_broken_reason_ = why;
    // The group's caches are incomplete now: this stage's epoch is over
    // (the scheduler's monitor sees epoch 0 and re-handshakes).
    epoch_ = 0;
    was_loaded = loaded_;
    loaded_ = false;
    group = socket_group_;
    // A GPU rank blocked in an NCCL all-reduce with the lost member would
    // wait forever: abort the communicator (under the lock, so the backend
    // cannot be destroyed meanwhile).
    if (abortable_backend_ != nullptr) abortable_backend_->AbortCollectives();
  }
  SPAR_LOG(WARNING) << "tensor-parallel group broken: " << why.message()
                    << "; not ready until it re-forms";
  if (group) group->Break(why);
  if (was_loaded && on_ready_change_) on_ready_change_(false);
}

void WorkerRuntime::OnMembershipChange(const std::string& what) {
  SPAR_LOG(INFO) << "tensor-parallel membership: " << what;
  bool formed_group_changed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    formed_group_changed = group_id_ != 0 && !tp_broken_ && membership_->version() != formed_version_;
  }
  if (formed_group_changed) BreakGroup(absl::UnavailableError(absl::StrCat("tensor-parallel peer ", what)));
  MaybeQueueFormGroup();
}

void WorkerRuntime::MaybeQueueFormGroup() {
  if (membership_ == nullptr || !membership_->complete()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || form_queued_ || !group_shard_known_) return;
    if (group_id_ != 0 && !tp_broken_ && membership_->version() == formed_version_) return;
    form_queued_ = true;
  }
  Task t;
  t.kind = Task::kFormGroup;
  Push(std::move(t));
}

void WorkerRuntime::DoFormGroup() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    form_queued_ = false;
  }
  if (!group_shard_ || !GroupStale() || !membership_->complete()) return;
  // No scheduler epoch yet (or the old one is over): the peers load at
  // epoch 0 and the scheduler's next Configure hands out its epoch.
  v1::ConfigureRequest request = last_configure_;
  request.set_epoch(0);
  if (absl::Status s = FormGroup(*group_shard_, request); !s.ok()) {
    SPAR_LOG(WARNING) << "forming the tensor-parallel group failed: " << s;
  }
}

absl::Status WorkerRuntime::ConfigurePeers(const v1::ConfigureRequest& request, bool forming,
                                           std::vector<v1::WorkerInfo>* infos) {
  const size_t n = peer_addresses_.size();
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts(n);
  std::vector<grpc::Status> status(n);
  std::vector<v1::ConfigureResponse> responses(n);
  uint64_t group_id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return absl::UnavailableError("worker is shutting down");
    group_id = group_id_;
    for (auto& c : contexts) {
      c = std::make_unique<grpc::ClientContext>();
      c->set_wait_for_ready(true);
      // Forming: the peer loads its shard before it answers.
      c->set_deadline(absl::ToChronoTime(absl::Now() + (forming ? options_.tp_load_timeout : options_.tp_join_timeout)));
      forming_calls_.push_back(c.get());
    }
  }
  std::vector<std::thread> calls;
  for (size_t i = 0; i < n; ++i) {
    calls.emplace_back([&, i] {
      v1::ConfigureRequest r = request;
      r.clear_next_stage_address();
      v1::TensorParallel* tp = r.mutable_shard()->mutable_tp();
      if (!forming) {
        tp->Clear();
        tp->set_size(options_.tp_size);
        tp->set_group_id(group_id);
      }
      tp->set_rank(static_cast<int>(i) + 1);
      auto stub = v1::Worker::NewStub(CreateWorkerChannel(peer_addresses_[i]));
      status[i] = stub->Configure(contexts[i].get(), r, &responses[i]);
      // A failed peer dooms the formation: stop waiting for the others.
      if (!status[i].ok() && forming) {
        std::lock_guard<std::mutex> lock(mu_);
        if (forming_listener_ != nullptr) forming_listener_->Cancel();
      }
    });
  }
  for (auto& t : calls) t.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    forming_calls_.clear();
  }
  for (size_t i = 0; i < n; ++i) {
    if (!status[i].ok()) {
      const absl::Status s = FromGrpcStatus(status[i]);
      return absl::Status(s.code(), absl::StrCat("tensor-parallel rank ", i + 1, " at ", peer_addresses_[i], ": ",
                                                 s.message()));
    }
    if (infos != nullptr) infos->push_back(responses[i].info());
  }
  return absl::OkStatus();
}

absl::Status WorkerRuntime::FormGroup(const StageOptions& requested, const v1::ConfigureRequest& request) {
  // A group that lost a member re-forms around the shard this rank holds.
  const bool rejoin = CanRejoin(requested);
  DropGroup(/*keep_shard=*/rejoin);
  group_shard_ = requested;
  {
    std::lock_guard<std::mutex> lock(mu_);
    group_shard_known_ = true;
  }
  const absl::Time start = absl::Now();
  uint64_t version = 0;
  SPAR_ASSIGN_OR_RETURN(peer_addresses_, membership_->WaitForAll(absl::Now() + options_.tp_join_timeout, &version));
  const uint64_t group_id = std::max<uint64_t>(absl::ToUnixNanos(absl::Now()), last_group_id_ + 1);
  last_group_id_ = group_id;

  StageOptions so = requested;
  so.tp = TpRank{0, options_.tp_size};
  v1::ConfigureRequest peer_request = request;
  v1::ShardSpec* shard = peer_request.mutable_shard();
  shard->set_model_path(so.model_dir);
  shard->set_first_layer(so.first_layer);
  shard->set_last_layer(so.last_layer);
  shard->set_num_blocks(so.num_blocks);
  shard->set_backend(so.backend);
  v1::TensorParallel* tp = shard->mutable_tp();
  tp->Clear();
  tp->set_size(options_.tp_size);
  tp->set_group_id(group_id);
  std::unique_ptr<SocketGroupListener> listener;
  if (so.backend == "cpu") {
    SPAR_ASSIGN_OR_RETURN(listener, SocketGroupListener::Open(options_.host));
    tp->set_cpu_group_port(listener->port());
    tp->set_cpu_group_secret(listener->secret());
  } else {
    SPAR_ASSIGN_OR_RETURN(so.nccl_unique_id, NewNcclGroupId());
    tp->set_nccl_unique_id(so.nccl_unique_id);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return absl::UnavailableError("worker is shutting down");
    forming_listener_ = listener.get();
  }
  SPAR_LOG(INFO) << "forming the tensor-parallel group of " << options_.tp_size << " ranks (" << so.backend << ")";
  // The peers join and load while this rank does: the rendezvous is
  // collective.
  std::vector<v1::WorkerInfo> infos;
  absl::Status peers;
  std::thread peer_calls([&] { peers = ConfigurePeers(peer_request, /*forming=*/true, &infos); });
  absl::Status own;
  if (listener != nullptr) {
    auto group = SocketGroup::Lead(listener.get(), options_.tp_size, options_.tp_join_timeout, options_.tp_op_timeout);
    if (group.ok()) {
      so.cpu_group = *group;
      std::lock_guard<std::mutex> lock(mu_);
      socket_group_ = *group;
    } else {
      own = group.status();
    }
  }
  if (own.ok()) own = rejoin ? Rejoin(so) : Load(so, /*announce=*/false);
  if (!own.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    for (grpc::ClientContext* c : forming_calls_) c->TryCancel();
  }
  peer_calls.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    forming_listener_ = nullptr;
  }
  if (!own.ok() || !peers.ok()) {
    DropGroup();
    // A peer's failure is the cause when this rank merely stopped waiting.
    const absl::Status& cause = !peers.ok() && (own.ok() || own.code() == absl::StatusCode::kCancelled) ? peers : own;
    return absl::Status(cause.code(), absl::StrCat("forming the tensor-parallel group: ", cause.message()));
  }
  for (const std::string& address : peer_addresses_) peer_links_.push_back(std::make_unique<Downstream>(address));
  {
    std::lock_guard<std::mutex> lock(mu_);
    group_id_ = group_id;
    formed_version_ = version;
    tp_broken_ = false;
    tp_broken_reason_ = absl::OkStatus();
    loaded_ = true;
    shard_.mutable_tp()->set_group_id(group_id);
    // Block ids mean the same slots on every rank: the stage has what its
    // smallest rank has.
    for (const v1::WorkerInfo& info : infos) {
      shard_.set_num_blocks(std::min<int64_t>(shard_.num_blocks(), info.shard().num_blocks()));
    }
  }
  SPAR_LOG(INFO) << "tensor-parallel group of " << options_.tp_size << " formed in "
                 << absl::FormatDuration(absl::Now() - start);
  if (membership_->version() != version) {
    // A member left or came back while the group formed.
    BreakGroup(absl::UnavailableError("a tensor-parallel peer changed while the group formed"));
    MaybeQueueFormGroup();
    return absl::UnavailableError("a tensor-parallel peer changed while the group formed");
  }
  if (on_ready_change_) on_ready_change_(true);
  return absl::OkStatus();
}

absl::Status WorkerRuntime::ConfigureAsPeer(const v1::ConfigureRequest& r) {
  const v1::TensorParallel& tp = r.shard().tp();
  if (tp.size() != options_.tp_size || tp.rank() != options_.tp_rank) {
    return absl::FailedPreconditionError(absl::StrCat("configure: this worker is tensor-parallel rank ",
                                                      options_.tp_rank, " of ", options_.tp_size,
                                                      "; the request is for rank ", tp.rank(), " of ", tp.size()));
  }
  if (tp.group_id() == 0) {
    return absl::InvalidArgumentError(
        "configure: a tensor-parallel peer is configured by its stage leader (no group_id in the request)");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (exec_ != nullptr && group_id_ == tp.group_id() && !tp_broken_) {
      // The same formation, a new epoch: only per-sequence state goes.
      exec_->ResetSequences();
      return absl::OkStatus();
    }
  }
  SPAR_ASSIGN_OR_RETURN(StageOptions so, ResolveShard(r.shard()));
  so.tp = TpRank{options_.tp_rank, options_.tp_size};
  const bool rejoin = CanRejoin(so);  // the same shard in a new group: keep it
  DropGroup(/*keep_shard=*/rejoin);
  if (so.backend == "cpu") {
    auto group = SocketGroup::Join(HostOf(options_.tp_leader), tp.cpu_group_port(), tp.cpu_group_secret(),
                                   options_.tp_rank, options_.tp_size, options_.tp_join_timeout,
                                   options_.tp_op_timeout);
    if (!group.ok()) return group.status();
    so.cpu_group = *group;
    std::lock_guard<std::mutex> lock(mu_);
    socket_group_ = *group;
  } else {
    so.nccl_unique_id = tp.nccl_unique_id();
  }
  if (absl::Status s = rejoin ? Rejoin(so) : Load(so, /*announce=*/false); !s.ok()) {
    DropGroup();
    return s;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    group_id_ = tp.group_id();
    tp_broken_ = false;
    tp_broken_reason_ = absl::OkStatus();
    loaded_ = true;
    shard_.mutable_tp()->set_group_id(group_id_);
  }
  SPAR_LOG(INFO) << "joined tensor-parallel group " << tp.group_id() << " as rank " << options_.tp_rank;
  if (on_ready_change_) on_ready_change_(true);
  return absl::OkStatus();
}

}  // namespace spar
