#include "services/worker/tp_group.h"

#include <algorithm>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "engine/engine.h"
#include "services/common/daemon.h"
#include "services/common/grpc_status.h"

namespace spar {
namespace {

// The host of "host:port" (brackets of an IPv6 literal removed).
std::string HostOf(const std::string& address) {
  std::string host = address.substr(0, address.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host;
}

}  // namespace

TpGroup::TpGroup(TpGroupOptions options, std::string listen_host, std::mutex* mu, Host* host)
    : options_(std::move(options)), listen_host_(std::move(listen_host)), mu_(mu), host_(host) {
  if (leader()) {
    membership_ = std::make_unique<TpMembership>(options_.size);
    membership_->set_on_change([this](const std::string& what) { OnMembershipChange(what); });
  }
}

void TpGroup::StartJoin(int port) {
  if (!peer()) return;
  v1::JoinTpGroupRequest request;
  request.set_tp_rank(options_.rank);
  request.set_tp_size(options_.size);
  request.set_leader_address(options_.leader);
  request.set_host(options_.peer_host);
  request.set_port(port);
  TpJoiner::Callbacks callbacks;
  callbacks.on_left = [this](const absl::Status& why) {
    Break(absl::UnavailableError(absl::StrCat("the stage leader at ", options_.leader, " went away: ", why.message())));
  };
  joiner_ = std::make_unique<TpJoiner>(options_.leader, std::move(request), std::move(callbacks));
}

void TpGroup::StopLocked() {
  stopping_ = true;
  if (forming_listener_ != nullptr) forming_listener_->Cancel();
  for (grpc::ClientContext* c : forming_calls_) c->TryCancel();
}

void TpGroup::CloseMembership() {
  if (membership_) membership_->Close();
  joiner_.reset();
}

void TpGroup::SendToPeers(const v1::MicroBatch& batch) {
  for (auto& link : peer_links_) link->Send(std::make_unique<v1::MicroBatch>(batch));
}

void TpGroup::Drop(bool keep_shard) {
  peer_links_.clear();  // closes the streams to the peers
  std::shared_ptr<SocketGroup> group;
  bool was_loaded;
  {
    std::lock_guard<std::mutex> lock(*mu_);
    group = std::move(socket_group_);
    socket_group_.reset();
    group_id_ = 0;
    was_loaded = host_->SetUnreadyLocked(/*end_epoch=*/false);
  }
  // Ranks still blocked in the old group's all-reduce fail now.
  if (group) group->Break(absl::UnavailableError("the tensor-parallel group is re-forming"));
  {
    std::lock_guard<std::mutex> lock(*mu_);
    // The group is over for every rank: its communicator is aborted, not
    // destroyed (an orderly destroy may wait on a rank that is gone).
    if (abortable_backend_ != nullptr) abortable_backend_->AbortCollectives();
    abortable_backend_ = nullptr;
  }
  if (!keep_shard) host_->ReleaseShard();  // memory first: a new formation loads again
  if (was_loaded) host_->ReadyChanged(false);
}

bool TpGroup::CanRejoin(const StageOptions& so) {
  const StageExecutor* exec = host_->executor();
  if (exec == nullptr || options_.size == 1) return false;
  const StageOptions& have = exec->options();
  return have.model_dir == so.model_dir && have.backend == so.backend && exec->first_layer() == so.first_layer &&
         (so.last_layer < 0 || exec->last_layer() == so.last_layer);
}

absl::Status TpGroup::Rejoin(const StageOptions& so) {
  const absl::Time start = absl::Now();
  StageExecutor* exec = host_->executor();
  SPAR_RETURN_IF_ERROR(exec->backend()->RejoinGroup(Backend::TpRendezvous{so.nccl_unique_id, so.cpu_group}));
  // Cached sequences belong to the old group's epoch.
  exec->ResetSequences();
  {
    std::lock_guard<std::mutex> lock(*mu_);
    abortable_backend_ = exec->backend();
  }
  SPAR_LOG(INFO) << "rejoined a tensor-parallel group as rank " << options_.rank << " in "
                 << absl::FormatDuration(absl::Now() - start) << ", keeping the loaded layers";
  return absl::OkStatus();
}

bool TpGroup::Stale() const {
  std::lock_guard<std::mutex> lock(*mu_);
  return group_id_ == 0 || broken_ || membership_->version() != formed_version_;
}

void TpGroup::Break(const absl::Status& why) {
  std::shared_ptr<SocketGroup> group;
  bool was_loaded;
  {
    std::lock_guard<std::mutex> lock(*mu_);
    if (group_id_ == 0 || broken_) return;  // nothing formed, or already broken
    broken_ = true;
    broken_reason_ = why;
    // The group's caches are incomplete now: this stage's epoch is over
    // (the scheduler's monitor sees epoch 0 and re-handshakes).
    was_loaded = host_->SetUnreadyLocked(/*end_epoch=*/true);
    group = socket_group_;
    // A GPU rank blocked in an NCCL all-reduce with the lost member would
    // wait forever: abort the communicator (under the lock, so the backend
    // cannot be destroyed meanwhile).
    if (abortable_backend_ != nullptr) abortable_backend_->AbortCollectives();
  }
  SPAR_LOG(WARNING) << "tensor-parallel group broken: " << why.message() << "; not ready until it re-forms";
  if (group) group->Break(why);
  if (was_loaded) host_->ReadyChanged(false);
}

void TpGroup::OnMembershipChange(const std::string& what) {
  SPAR_LOG(INFO) << "tensor-parallel membership: " << what;
  bool formed_group_changed;
  {
    std::lock_guard<std::mutex> lock(*mu_);
    formed_group_changed = group_id_ != 0 && !broken_ && membership_->version() != formed_version_;
  }
  if (formed_group_changed) Break(absl::UnavailableError(absl::StrCat("tensor-parallel peer ", what)));
  MaybeQueueFormation();
}

void TpGroup::MaybeQueueFormation() {
  if (membership_ == nullptr || !membership_->complete()) return;
  {
    std::lock_guard<std::mutex> lock(*mu_);
    if (stopping_ || form_queued_ || !group_shard_known_) return;
    if (group_id_ != 0 && !broken_ && membership_->version() == formed_version_) return;
    form_queued_ = true;
  }
  host_->QueueFormation();
}

void TpGroup::FormWhenComplete(const StageOptions& shard) {
  group_shard_ = shard;
  {
    std::lock_guard<std::mutex> lock(*mu_);
    group_shard_known_ = true;
  }
  MaybeQueueFormation();
}

void TpGroup::FormQueued() {
  {
    std::lock_guard<std::mutex> lock(*mu_);
    form_queued_ = false;
  }
  if (!group_shard_ || !Stale() || !membership_->complete()) return;
  // No scheduler epoch yet (or the old one is over): the peers load at
  // epoch 0 and the scheduler's next Configure hands out its epoch.
  v1::ConfigureRequest request = last_configure_;
  request.set_epoch(0);
  if (absl::Status s = Form(*group_shard_, request); !s.ok()) {
    SPAR_LOG(WARNING) << "forming the tensor-parallel group failed: " << s;
  }
}

absl::Status TpGroup::ConfigurePeers(const v1::ConfigureRequest& request) {
  return ConfigurePeers(request, /*forming=*/false, nullptr);
}

absl::Status TpGroup::ConfigurePeers(const v1::ConfigureRequest& request, bool forming,
                                     std::vector<v1::WorkerInfo>* infos) {
  const size_t n = peer_addresses_.size();
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts(n);
  std::vector<grpc::Status> status(n);
  std::vector<v1::ConfigureResponse> responses(n);
  uint64_t group_id;
  {
    std::lock_guard<std::mutex> lock(*mu_);
    if (stopping_) return absl::UnavailableError("worker is shutting down");
    group_id = group_id_;
    for (auto& c : contexts) {
      c = std::make_unique<grpc::ClientContext>();
      c->set_wait_for_ready(true);
      // Forming: the peer loads its shard before it answers.
      c->set_deadline(absl::ToChronoTime(absl::Now() + (forming ? options_.load_timeout : options_.join_timeout)));
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
        tp->set_size(options_.size);
        tp->set_group_id(group_id);
      }
      tp->set_rank(static_cast<int>(i) + 1);
      auto stub = v1::Worker::NewStub(CreateWorkerChannel(peer_addresses_[i]));
      status[i] = stub->Configure(contexts[i].get(), r, &responses[i]);
      // A failed peer dooms the formation: stop waiting for the others.
      if (!status[i].ok() && forming) {
        std::lock_guard<std::mutex> lock(*mu_);
        if (forming_listener_ != nullptr) forming_listener_->Cancel();
      }
    });
  }
  for (auto& t : calls) t.join();
  {
    std::lock_guard<std::mutex> lock(*mu_);
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

absl::Status TpGroup::Form(const StageOptions& requested, const v1::ConfigureRequest& request) {
  // A group that lost a member re-forms around the shard this rank holds.
  const bool rejoin = CanRejoin(requested);
  Drop(/*keep_shard=*/rejoin);
  group_shard_ = requested;
  {
    std::lock_guard<std::mutex> lock(*mu_);
    group_shard_known_ = true;
  }
  const absl::Time start = absl::Now();
  uint64_t version = 0;
  SPAR_ASSIGN_OR_RETURN(peer_addresses_, membership_->WaitForAll(absl::Now() + options_.join_timeout, &version));
  const uint64_t group_id = std::max<uint64_t>(absl::ToUnixNanos(absl::Now()), last_group_id_ + 1);
  last_group_id_ = group_id;

  StageOptions so = requested;
  so.tp = TpRank{0, options_.size};
  v1::ConfigureRequest peer_request = request;
  v1::ShardSpec* shard = peer_request.mutable_shard();
  shard->set_model_path(so.model_dir);
  shard->set_first_layer(so.first_layer);
  shard->set_last_layer(so.last_layer);
  shard->set_num_blocks(so.num_blocks);
  shard->set_backend(so.backend);
  // Every rank holds the same caches: the peers allocate the leader's formats.
  SPAR_ASSIGN_OR_RETURN(const CacheFormats formats, ResolveCacheFormats(so.backend, so.cache_dtypes));
  shard->set_kv_cache_dtype(LatentFormatName(formats.latent));
  shard->set_indexer_cache_dtype(IndexerFormatName(formats.indexer));
  v1::TensorParallel* tp = shard->mutable_tp();
  tp->Clear();
  tp->set_size(options_.size);
  tp->set_group_id(group_id);
  std::unique_ptr<SocketGroupListener> listener;
  if (so.backend == "cpu") {
    SPAR_ASSIGN_OR_RETURN(listener, SocketGroupListener::Open(listen_host_));
    tp->set_cpu_group_port(listener->port());
    tp->set_cpu_group_secret(listener->secret());
  } else {
    SPAR_ASSIGN_OR_RETURN(so.nccl_unique_id, NewNcclGroupId());
    tp->set_nccl_unique_id(so.nccl_unique_id);
  }
  {
    std::lock_guard<std::mutex> lock(*mu_);
    if (stopping_) return absl::UnavailableError("worker is shutting down");
    forming_listener_ = listener.get();
  }
  SPAR_LOG(INFO) << "forming the tensor-parallel group of " << options_.size << " ranks (" << so.backend << ")";
  // The peers join and load while this rank does: the rendezvous is
  // collective.
  std::vector<v1::WorkerInfo> infos;
  absl::Status peers;
  std::thread peer_calls([&] { peers = ConfigurePeers(peer_request, /*forming=*/true, &infos); });
  absl::Status own;
  if (listener != nullptr) {
    auto group = SocketGroup::Lead(listener.get(), options_.size, options_.join_timeout, options_.op_timeout);
    if (group.ok()) {
      so.cpu_group = *group;
      std::lock_guard<std::mutex> lock(*mu_);
      socket_group_ = *group;
    } else {
      own = group.status();
    }
  }
  if (own.ok()) own = rejoin ? Rejoin(so) : host_->LoadShard(so);
  if (!own.ok()) {
    std::lock_guard<std::mutex> lock(*mu_);
    for (grpc::ClientContext* c : forming_calls_) c->TryCancel();
  }
  peer_calls.join();
  {
    std::lock_guard<std::mutex> lock(*mu_);
    forming_listener_ = nullptr;
  }
  if (!own.ok() || !peers.ok()) {
    Drop();
    // A peer's failure is the cause when this rank merely stopped waiting.
    const absl::Status& cause = !peers.ok() && (own.ok() || own.code() == absl::StatusCode::kCancelled) ? peers : own;
    return absl::Status(cause.code(), absl::StrCat("forming the tensor-parallel group: ", cause.message()));
  }
  for (const std::string& address : peer_addresses_) peer_links_.push_back(std::make_unique<Downstream>(address));
  {
    std::lock_guard<std::mutex> lock(*mu_);
    group_id_ = group_id;
    formed_version_ = version;
    broken_ = false;
    broken_reason_ = absl::OkStatus();
    // Block ids mean the same slots on every rank: the stage has what its
    // smallest rank has.
    int64_t max_blocks = std::numeric_limits<int64_t>::max();
    for (const v1::WorkerInfo& info : infos) max_blocks = std::min<int64_t>(max_blocks, info.shard().num_blocks());
    host_->SetReadyLocked(group_id, max_blocks);
  }
  SPAR_LOG(INFO) << "tensor-parallel group of " << options_.size << " formed in "
                 << absl::FormatDuration(absl::Now() - start);
  if (membership_->version() != version) {
    // A member left or came back while the group formed.
    Break(absl::UnavailableError("a tensor-parallel peer changed while the group formed"));
    MaybeQueueFormation();
    return absl::UnavailableError("a tensor-parallel peer changed while the group formed");
  }
  host_->ReadyChanged(true);
  return absl::OkStatus();
}

absl::Status TpGroup::ConfigureAsPeer(const v1::ConfigureRequest& r) {
  const v1::TensorParallel& tp = r.shard().tp();
  if (tp.size() != options_.size || tp.rank() != options_.rank) {
    return absl::FailedPreconditionError(absl::StrCat("configure: this worker is tensor-parallel rank ",
                                                      options_.rank, " of ", options_.size,
                                                      "; the request is for rank ", tp.rank(), " of ", tp.size()));
  }
  if (tp.group_id() == 0) {
    return absl::InvalidArgumentError(
        "configure: a tensor-parallel peer is configured by its stage leader (no group_id in the request)");
  }
  {
    std::lock_guard<std::mutex> lock(*mu_);
    if (host_->executor() != nullptr && group_id_ == tp.group_id() && !broken_) {
      // The same formation, a new epoch: only per-sequence state goes.
      host_->executor()->ResetSequences();
      return absl::OkStatus();
    }
  }
  SPAR_ASSIGN_OR_RETURN(StageOptions so, host_->ResolveShard(r.shard()));
  so.tp = TpRank{options_.rank, options_.size};
  const bool rejoin = CanRejoin(so);  // the same shard in a new group: keep it
  Drop(/*keep_shard=*/rejoin);
  if (so.backend == "cpu") {
    auto group = SocketGroup::Join(HostOf(options_.leader), tp.cpu_group_port(), tp.cpu_group_secret(),
                                   options_.rank, options_.size, options_.join_timeout, options_.op_timeout);
    if (!group.ok()) return group.status();
    so.cpu_group = *group;
    std::lock_guard<std::mutex> lock(*mu_);
    socket_group_ = *group;
  } else {
    so.nccl_unique_id = tp.nccl_unique_id();
  }
  if (absl::Status s = rejoin ? Rejoin(so) : host_->LoadShard(so); !s.ok()) {
    Drop();
    return s;
  }
  {
    std::lock_guard<std::mutex> lock(*mu_);
    group_id_ = tp.group_id();
    broken_ = false;
    broken_reason_ = absl::OkStatus();
    host_->SetReadyLocked(group_id_, std::numeric_limits<int64_t>::max());
  }
  SPAR_LOG(INFO) << "joined tensor-parallel group " << tp.group_id() << " as rank " << options_.rank;
  host_->ReadyChanged(true);
  return absl::OkStatus();
}

}  // namespace spar
