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
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/metrics/worker_metrics.h"
#include "services/worker/downstream.h"
#include "services/worker/results_hub.h"
#include "services/worker/stage_executor.h"
#include "services/worker/tp_group.h"
#include "services/worker/tp_membership.h"
#include "spar/v1/worker.pb.h"

namespace spar {

struct WorkerOptions {
  // What to load. model_dir empty: wait for Configure to name the model.
  StageOptions stage;
  // Load at start (else at the first Configure).
  bool preload = false;
  // This process's place in its stage's tensor-parallel group and the
  // group's timeouts (tp_group.h).
  TpGroupOptions tp;
  // Where this worker listens (the leader's socket group binds here too).
  std::string host = "0.0.0.0";
  // This worker's stage index when known at start (--stage); -1 until the
  // scheduler's Configure names it.
  int stage_index = -1;
  // Per-micro-batch figures go here (may be null); must outlive the runtime.
  WorkerMetrics* metrics = nullptr;
};

class WorkerRuntime : private TpGroup::Host {
 public:
  using ConfigureDone = std::function<void(absl::StatusOr<v1::WorkerInfo>)>;

  explicit WorkerRuntime(WorkerOptions options);
  ~WorkerRuntime() override;
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
  TpMembership* tp_membership() { return group_.membership(); }
  // Peers: start holding membership in the leader's group; `port` is where
  // this worker's service listens. Call once the server is up.
  void StartTpJoin(int port) { group_.StartJoin(port); }
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
  // Tensor parallelism: the group (tp_group.h) forms, breaks and re-forms;
  // this worker is its Host.
  bool tp_leader() const { return group_.leader(); }
  bool tp_peer() const { return group_.peer(); }
  // TpGroup::Host.
  absl::StatusOr<StageOptions> ResolveShard(const v1::ShardSpec& want) const override;
  StageExecutor* executor() override { return exec_.get(); }
  absl::Status LoadShard(const StageOptions& options) override { return Load(options, /*announce=*/false); }
  void ReleaseShard() override { exec_.reset(); }
  bool SetUnreadyLocked(bool end_epoch) override;
  void SetReadyLocked(uint64_t group_id, int64_t max_blocks) override;
  void ReadyChanged(bool ready) override;
  void QueueFormation() override;
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
  std::unique_ptr<Downstream> downstream_;

  mutable std::mutex mu_;  // also guards group_'s state (tp_group.h)
  // This worker's tensor-parallel group (inert for tp_size 1).
  TpGroup group_;
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
  int num_speculative_tokens_ = 0;  // the loaded last stage's MTP drafting (0: none)
  uint64_t epoch_ = 0;
  int stage_index_ = 0, num_stages_ = 0;
  // Stage label of the metrics: options_.stage_index until configured.
  int metrics_stage_ = -1;
  std::string next_address_;
  absl::Status fatal_;
  // Statistics window (guarded by mu_).
  absl::Time window_start_;
  uint64_t micro_batches_ = 0, tokens_ = 0, bytes_in_ = 0, bytes_out_ = 0;
  int64_t busy_ns_ = 0;
  size_t sampling_states_ = 0;
  StageMemory memory_;
};

}  // namespace spar

#endif  // SPAR_SERVICES_WORKER_WORKER_RUNTIME_H_
