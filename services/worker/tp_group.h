// A worker's tensor-parallel group (DESIGN.md §1): a stage is T worker
// processes; the leader (rank 0) is the only one the scheduler and the
// neighbouring stages see. WorkerRuntime owns one TpGroup and calls it; the
// group reaches the worker only through TpGroup::Host.
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
//   member returns. A rank whose shard is still the one asked for rejoins
//   the new group keeping its layers (Backend::RejoinGroup).
//
// The micro-batches reach the peers over gRPC, not an NCCL broadcast: the
// plan is host data that must travel anyway, ordering is that of one stream
// per peer, and the same path serves the cpu backend; for the cuda backend
// the hidden states cross the loopback once per peer (a decode step's
// [batch x 6144] is small; a 4096-token prefill chunk is ~100 MB of fp32
// today, a cost to revisit with bf16 transfers or a broadcast).
//
// Threads: the group's state is guarded by the worker's mutex (`mu`, given
// at construction), because losing a member also ends the worker's epoch
// and readiness in the same critical section (the *Locked host calls).
// Methods marked "compute thread" run only on the worker's compute thread;
// Break and the membership callbacks come from any thread.
#ifndef SPAR_SERVICES_WORKER_TP_GROUP_H_
#define SPAR_SERVICES_WORKER_TP_GROUP_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/client_context.h>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/socket_group.h"
#include "services/worker/downstream.h"
#include "services/worker/stage_executor.h"
#include "services/worker/tp_joiner.h"
#include "services/worker/tp_membership.h"
#include "spar/v1/worker.pb.h"

namespace spar {

struct TpGroupOptions {
  // This process's place in its stage's group (DESIGN §1: one process per
  // GPU, the leader is rank 0 and the only one the scheduler and the
  // neighbouring stages talk to).
  int rank = 0;
  int size = 1;
  // Peers: the leader's worker address (host:port); the host also locates
  // the cpu backend's socket group.
  std::string leader;
  // Peers: the host the leader dials back (empty: the address the peer's
  // call comes from).
  std::string peer_host;
  // cpu groups: the longest one all-reduce may wait for the other ranks.
  absl::Duration op_timeout = absl::Seconds(60);
  // How long a leader's Configure waits for missing peers, and a group's
  // rendezvous for its ranks.
  absl::Duration join_timeout = absl::Seconds(30);
  // A peer's Configure (it loads its shard): the longest a leader waits.
  absl::Duration load_timeout = absl::Hours(2);
};

class TpGroup {
 public:
  // What the group needs of its worker.
  class Host {
   public:
    virtual ~Host() = default;
    // The StageOptions a Configure's shard asks for.
    virtual absl::StatusOr<StageOptions> ResolveShard(const v1::ShardSpec& want) const = 0;
    // Compute thread: the loaded shard (null if none); load one without
    // announcing readiness (the group does once every rank is in); free it.
    virtual StageExecutor* executor() = 0;
    virtual absl::Status LoadShard(const StageOptions& options) = 0;
    virtual void ReleaseShard() = 0;
    // With `mu` held. Not ready (and, `end_epoch`, the scheduler's epoch is
    // over); returns whether it was ready.
    virtual bool SetUnreadyLocked(bool end_epoch) = 0;
    // Ready as group `group_id`, with at most `max_blocks` KV blocks (the
    // fewest any rank has).
    virtual void SetReadyLocked(uint64_t group_id, int64_t max_blocks) = 0;
    // Without `mu`: readiness changed (the worker's on_ready_change), and
    // run FormQueued on the compute thread.
    virtual void ReadyChanged(bool ready) = 0;
    virtual void QueueFormation() = 0;
  };

  // `listen_host`: where the leader's cpu socket group listens (the
  // worker's own address).
  TpGroup(TpGroupOptions options, std::string listen_host, std::mutex* mu, Host* host);
  TpGroup(const TpGroup&) = delete;
  TpGroup& operator=(const TpGroup&) = delete;

  bool leader() const { return options_.size > 1 && options_.rank == 0; }
  bool peer() const { return options_.rank > 0; }
  // The leader's registry of its peers (JoinTpGroup feeds it); null unless
  // this worker leads a group of size > 1.
  TpMembership* membership() { return membership_.get(); }

  // Peers: start holding membership in the leader's group; `port` is where
  // this worker's service listens.
  void StartJoin(int port);

  // Leader: form the group around `shard` as soon as every peer has joined
  // (a preloading leader).
  void FormWhenComplete(const StageOptions& shard);
  // Leader, compute thread: forms the group (every peer loads and joins the
  // rendezvous with the leader, in parallel) for `shard`, configuring the
  // peers with `request`'s epoch.
  absl::Status Form(const StageOptions& shard, const v1::ConfigureRequest& request);
  // Leader, compute thread: a formation queued through Host::QueueFormation.
  void FormQueued();
  // Leader: whether the group must be (re-)formed before use.
  bool Stale() const;
  // Leader, compute thread: tells the peers of the formed group the new
  // epoch of `request`, and remembers it for formations on its own.
  absl::Status ConfigurePeers(const v1::ConfigureRequest& request);
  void RememberConfigure(const v1::ConfigureRequest& request) { last_configure_ = request; }
  // Peer, compute thread: applies the leader's Configure (joins its group
  // if it is new).
  absl::Status ConfigureAsPeer(const v1::ConfigureRequest& request);

  // Leader, compute thread: every rank executes the micro-batch.
  void SendToPeers(const v1::MicroBatch& batch);

  // With `mu` held: the formation held (0: none), whether the group lost a
  // member since, and why.
  uint64_t group_id_locked() const { return group_id_; }
  bool broken_locked() const { return broken_; }
  const absl::Status& broken_reason_locked() const { return broken_reason_; }
  // With `mu` held: the backend whose collectives a lost member aborts (the
  // loaded shard's; null while there is none).
  void SetBackendLocked(Backend* backend) { abortable_backend_ = backend; }

  // Shutdown. With `mu` held: a formation in progress gives up (waits for
  // peers, the rendezvous, the calls to the peers). Then, without: stop the
  // membership; and once the compute thread is gone, close the peer links.
  void StopLocked();
  void CloseMembership();
  void ClosePeerLinks() { peer_links_.clear(); }

 private:
  absl::Status ConfigurePeers(const v1::ConfigureRequest& request, bool forming, std::vector<v1::WorkerInfo>* infos);
  // Drops the group and, unless `keep_shard`, the model (memory first,
  // before a new formation that loads again).
  void Drop(bool keep_shard = false);
  // Whether the loaded shard is the one `so` asks for, so that a new group
  // can be joined without reloading it.
  bool CanRejoin(const StageOptions& so);
  // Joins the loaded shard's backend to the group of `so` (its NCCL id or
  // cpu group): a re-formation that keeps the weights.
  absl::Status Rejoin(const StageOptions& so);
  // The group lost a member (leader: a peer's stream ended; peer: the
  // leader's did): not ready, epoch 0, blocked all-reduces fail now.
  void Break(const absl::Status& why);
  void OnMembershipChange(const std::string& what);
  void MaybeQueueFormation();

  const TpGroupOptions options_;
  const std::string listen_host_;
  std::mutex* const mu_;
  Host* const host_;

  std::unique_ptr<TpMembership> membership_;  // leader of a group
  std::unique_ptr<TpJoiner> joiner_;          // peer

  // Compute thread.
  // Leader: one Pipeline stream per peer (index rank - 1) carrying every
  // micro-batch the leader executes.
  std::vector<std::unique_ptr<Downstream>> peer_links_;
  std::vector<std::string> peer_addresses_;
  // Leader: the StageOptions of the last (re-)formation request, so a group
  // that lost a member re-forms on its own when the member is back.
  std::optional<StageOptions> group_shard_;
  v1::ConfigureRequest last_configure_;
  uint64_t last_group_id_ = 0;

  // Guarded by *mu_.
  uint64_t group_id_ = 0;        // formation held; 0: none
  uint64_t formed_version_ = 0;  // leader: membership version at formation
  bool broken_ = false;          // lost a member since formation
  absl::Status broken_reason_;
  bool form_queued_ = false;
  bool group_shard_known_ = false;  // group_shard_ is set: a lost member's return re-forms the group
  bool stopping_ = false;
  Backend* abortable_backend_ = nullptr;
  std::shared_ptr<SocketGroup> socket_group_;        // cpu groups: to Break() from any thread
  SocketGroupListener* forming_listener_ = nullptr;  // leader, while forming: StopLocked cancels it
  std::vector<grpc::ClientContext*> forming_calls_;  // leader's calls to its peers: StopLocked cancels them
};

}  // namespace spar

#endif  // SPAR_SERVICES_WORKER_TP_GROUP_H_
