// The worker's engine room: one compute thread that loads the shard and
// executes micro-batches strictly in arrival order, the link to the next
// stage, the last stage's results outbox, and statistics. gRPC threads only
// enqueue work here (WorkerService is a thin adapter); nothing in this class
// blocks a caller.
//
// Thread-safe. Lifetime: Start() once; the destructor stops the compute
// thread after the task it is running.
#ifndef SPAR_SERVICES_WORKER_WORKER_RUNTIME_H_
#define SPAR_SERVICES_WORKER_WORKER_RUNTIME_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/socket_group.h"
#include "services/metrics/worker_metrics.h"
#include "services/worker/downstream.h"
#include "services/worker/results_hub.h"
#include "services/worker/stage_executor.h"
#include "services/worker/tp_joiner.h"
#include "services/worker/tp_membership.h"
#include "spar/v1/worker.pb.h"

namespace spar {

struct WorkerOptions {
  // What to load. model_dir empty: wait for Configure to name the model.
  StageOptions stage;
  // Load at start (else at the first Configure).
  bool preload = false;
  // This process's place in its stage's tensor-parallel group (DESIGN §1:
  // one process per GPU, the leader is rank 0 and the only one the
  // scheduler and the neighbouring stages talk to).
  int tp_rank = 0;
  int tp_size = 1;
  // Peers: the leader's worker address (host:port); the host also locates
  // the cpu backend's socket group.
  std::string tp_leader;
  // Where this worker listens (the leader's socket group binds here too).
  std::string host = "0.0.0.0";
  // Peers: the host the leader dials back (empty: the address the peer's
  // call comes from).
  std::string tp_host;
  // cpu groups: the longest one all-reduce may wait for the other ranks.
  absl::Duration tp_op_timeout = absl::Seconds(60);
  // How long a leader's Configure waits for missing peers, and a group's
  // rendezvous for its ranks.
  absl::Duration tp_join_timeout = absl::Seconds(30);
  // A peer's Configure (it loads its shard): the longest a leader waits.
  absl::Duration tp_load_timeout = absl::Hours(2);
  // This worker's stage index when known at start (--stage); -1 until the
  // scheduler's Configure names it.
  int stage_index = -1;
  // Per-micro-batch figures go here (may be null); must outlive the runtime.
  WorkerMetrics* metrics = nullptr;
};

class WorkerRuntime {
 public:
  using ConfigureDone = std::function<void(absl::StatusOr<v1::WorkerInfo>)>;

  explicit WorkerRuntime(WorkerOptions options);
  ~WorkerRuntime();
  WorkerRuntime(const WorkerRuntime&) = delete;
  WorkerRuntime& operator=(const WorkerRuntime&) = delete;

  // Starts the compute thread (and the preload, if asked for).
  // `on_ready_change(true)` is called once a shard is loaded.
  void Start(std::function<void(bool)> on_ready_change = nullptr);
  // Stops the compute thread after its current task; queued Configure calls
  // and later ones are answered UNAVAILABLE, queued micro-batches dropped.
  // Idempotent; the destructor calls it.
  void Stop();

  // Queues a Configure; `done` runs on the compute thread when it is
  // applied (after every micro-batch queued before it).
  void Configure(v1::ConfigureRequest request, ConfigureDone done);
  // Queues a micro-batch from the upstream stream.
  void Enqueue(std::unique_ptr<v1::MicroBatch> batch);

  v1::WorkerInfo Info() const;
  v1::WorkerStats Stats(bool reset);
  // The gauges of the metrics port, now.
  WorkerGauges Gauges() const;

  // Upstream Pipeline streams (the scheduler's or the previous stage's):
  // the service reports them opening and closing, so a draining worker
  // knows when its upstream is done with it.
  void UpstreamOpened();
  void UpstreamClosed();
  // Nothing to do and nobody upstream: no open upstream stream, no task
  // queued or running. A draining worker may exit then.
  bool Idle() const;
  ResultsHub* results() { return &results_; }
  // The leader's registry of its tensor-parallel peers (JoinTpGroup feeds
  // it); null unless this worker is the leader of a group of size > 1.
  TpMembership* tp_membership() { return membership_.get(); }
  // Peers: start holding membership in the leader's group; `port` is where
  // this worker's service listens. Call once the server is up.
  void StartTpJoin(int port);
  uint64_t epoch() const;
  bool is_last_stage() const;
  // A preload failure: the daemon should exit (a worker without its shard
  // is of no use); empty while fine.
  absl::Status fatal_error() const;

 private:
  struct Task {
    enum Kind { kLoad, kConfigure, kBatch, kFormGroup } kind = kBatch;
    v1::ConfigureRequest configure;
    ConfigureDone done;
    std::unique_ptr<v1::MicroBatch> batch;
    absl::Time arrived;
  };

  void Run();
  // Loads the shard; `announce`: report readiness (a TP group reports it
  // once every rank has loaded).
  absl::Status Load(const StageOptions& options, bool announce = true);
  // Tensor parallelism (worker_tp.cc).
  bool tp_leader() const { return options_.tp_size > 1 && options_.tp_rank == 0; }
  bool tp_peer() const { return options_.tp_rank > 0; }
  // The StageOptions a Configure asks for (model, layers, blocks, backend).
  absl::StatusOr<StageOptions> ResolveShard(const v1::ShardSpec& want) const;
  // Leader: forms the group (every peer loads and joins the rendezvous with
  // the leader, in parallel) for `so`, configuring the peers with `epoch`.
  absl::Status FormGroup(const StageOptions& so, const v1::ConfigureRequest& request);
  // Leader: tells the peers of the formed group the new epoch.
  absl::Status ConfigurePeers(const v1::ConfigureRequest& request, bool forming,
                              std::vector<v1::WorkerInfo>* infos);
  // Peer: applies the leader's Configure (joins its group if it is new).
  absl::Status ConfigureAsPeer(const v1::ConfigureRequest& request);
  // Drops the group and, unless `keep_shard`, the model (memory first,
  // before a new formation that loads again).
  void DropGroup(bool keep_shard = false);
  // Whether the loaded shard is the one `so` asks for, so that a new group
  // can be joined without reloading it (Backend::RejoinGroup).
  bool CanRejoin(const StageOptions& so) const;
  // Joins the loaded shard's backend to the group of `so` (its NCCL id or
  // cpu group): a re-formation that keeps the weights.
  absl::Status Rejoin(const StageOptions& so);
  // Whether the leader's group must be (re-)formed before use.
  bool GroupStale() const;
  // The group lost a member (leader: a peer's stream ended; peer: the
  // leader's did): not ready, epoch 0, blocked all-reduces fail now.
  void BreakGroup(const absl::Status& why);
  void OnMembershipChange(const std::string& what);
  void MaybeQueueFormGroup();
  void DoFormGroup();
  absl::StatusOr<v1::WorkerInfo> DoConfigure(const v1::ConfigureRequest& request);
  void DoBatch(std::unique_ptr<v1::MicroBatch> batch, absl::Time arrived);
  absl::StatusOr<StageOutput> ExecuteBatch(const v1::MicroBatch& batch);
  v1::WorkerInfo InfoLocked() const;
  void Push(Task task);

  const WorkerOptions options_;
  std::function<void(bool)> on_ready_change_;
  ResultsHub results_;

  // Owned by the compute thread.
  std::unique_ptr<StageExecutor> exec_;
  // exec_'s backend while it lives (guarded by mu_): BreakGroup, on another
  // thread, aborts its collectives.
  Backend* abortable_backend_ = nullptr;
  std::unique_ptr<Downstream> downstream_;
  // Leader: one Pipeline stream per peer (index rank - 1) carrying every
  // micro-batch the leader executes.
  std::vector<std::unique_ptr<Downstream>> peer_links_;
  std::vector<std::string> peer_addresses_;
  // Leader: the StageOptions of the last (re-)formation request, so a group
  // that lost a member re-forms on its own when the member is back.
  std::optional<StageOptions> group_shard_;
  v1::ConfigureRequest last_configure_;
  uint64_t last_group_id_ = 0;

  std::unique_ptr<TpMembership> membership_;  // leader of a group
  std::unique_ptr<TpJoiner> joiner_;          // peer

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> tasks_;
  bool stopping_ = false;
  bool executing_ = false;
  int open_upstreams_ = 0;
  std::thread thread_;
  // Published state (guarded by mu_).
  bool loaded_ = false;
  bool last_stage_ = false;
  v1::ShardSpec shard_;
  int num_model_layers_ = 0;
  int64_t hidden_size_ = 0, vocab_size_ = 0;
  uint64_t epoch_ = 0;
  int stage_index_ = 0, num_stages_ = 0;
  // Stage label of the metrics: options_.stage_index until configured.
  int metrics_stage_ = -1;
  std::string next_address_;
  absl::Status fatal_;
  // Tensor-parallel group state (guarded by mu_).
  uint64_t group_id_ = 0;           // formation held; 0: none
  uint64_t formed_version_ = 0;     // leader: membership version at formation
  bool tp_broken_ = false;          // lost a member since formation
  absl::Status tp_broken_reason_;
  bool form_queued_ = false;
  bool group_shard_known_ = false;  // group_shard_ is set: a lost member's return re-forms the group
  std::shared_ptr<SocketGroup> socket_group_;  // cpu groups: to Break() from any thread
  SocketGroupListener* forming_listener_ = nullptr;  // leader, while forming: Stop() cancels it
  std::vector<grpc::ClientContext*> forming_calls_;  // leader's calls to its peers: Stop() cancels them
  // Statistics window (guarded by mu_).
  absl::Time window_start_;
  uint64_t micro_batches_ = 0, tokens_ = 0, bytes_in_ = 0, bytes_out_ = 0;
  int64_t busy_ns_ = 0;
  size_t sampling_states_ = 0;
  StageMemory memory_;
};

}  // namespace spar

#endif  // SPAR_SERVICES_WORKER_WORKER_RUNTIME_H_
