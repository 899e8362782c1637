// The pipeline over gRPC: the scheduler's connections to the stage leaders
// (spar-worker). Connect() handshakes with every stage (GetInfo, then
// Configure from the last stage to the first, each told its layer range and
// the next stage's address), subscribes to the last stage's Results stream
// and opens the Pipeline stream to stage 0. A sender thread writes plans in
// order; a receiver thread delivers results; a monitor thread polls every
// stage (GetInfo) and fails the pipeline promptly when one is unreachable
// or was restarted (its epoch changed), rather than waiting for the
// scheduler's step timeout.
//
// Thread-safe.
#ifndef SPAR_SERVICES_SCHEDULER_GRPC_PIPELINE_H_
#define SPAR_SERVICES_SCHEDULER_GRPC_PIPELINE_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/client_context.h>

#include "engine/model_config.h"
#include "services/scheduler/pipeline.h"
#include "spar/v1/worker.grpc.pb.h"

namespace spar {

struct GrpcPipelineOptions {
  std::vector<std::string> workers;       // stage leaders' host:port, stage 0 first
  std::string model_path;                 // for workers started without --model
  std::vector<LayerRange> stage_layers;   // empty: an even split
  int64_t num_blocks = 0;                 // 0: the smallest of the workers'
  std::string backend;                    // empty: whatever the workers run
};

class GrpcPipeline : public Pipeline {
 public:
  GrpcPipeline(GrpcPipelineOptions options, ModelConfig config);
  ~GrpcPipeline() override;

  absl::StatusOr<PipelineInfo> Connect(Callbacks callbacks, absl::Duration timeout) override;
  void Send(MicroBatchPlan plan) override;
  void Close() override;
  void Shutdown() override;

 private:
  absl::StatusOr<v1::WorkerInfo> WaitForWorker(size_t stage, absl::Time until);
  void RunSender(uint64_t epoch);
  void RunReceiver(uint64_t epoch);
  void RunMonitor(uint64_t epoch);
  void Fail(const absl::Status& status);

  const GrpcPipelineOptions options_;
  const ModelConfig config_;
  std::vector<std::unique_ptr<v1::Worker::Stub>> stubs_;
  Callbacks callbacks_;
  uint64_t last_epoch_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;          // the sender waits on it
  std::condition_variable monitor_cv_;  // the monitor waits on it (its own: notify_one must reach the sender)
  std::deque<MicroBatchPlan> queue_;
  bool closing_ = false;
  std::atomic<bool> failed_{false};
  uint64_t epoch_ = 0;
  std::unique_ptr<grpc::ClientContext> send_ctx_, recv_ctx_;
  std::thread sender_, receiver_, monitor_;
  std::atomic<bool> shutdown_{false};
  grpc::ClientContext* connect_ctx_ = nullptr;  // a Configure in progress (guarded by mu_)
};

}  // namespace spar

#endif  // SPAR_SERVICES_SCHEDULER_GRPC_PIPELINE_H_
