// The scheduler's view of the pipeline: somewhere to send micro-batch plans
// and from where results come back, in order. GrpcPipeline talks to
// spar-worker daemons; tests plug in an in-process one.
#ifndef SPAR_SERVICES_SCHEDULER_PIPELINE_H_
#define SPAR_SERVICES_SCHEDULER_PIPELINE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/common/layer_split.h"
#include "services/common/micro_batch.h"

namespace spar {

struct PipelineInfo {
  int num_stages = 0;
  int64_t num_blocks = 0;  // KV blocks every stage holds
  std::vector<LayerRange> stage_layers;
  // The most drafts per step the last stage verifies with its MTP layer
  // (0: no speculative decoding).
  int num_speculative_tokens = 0;
  // Per stage, the cache formats its workers allocated, "latent/indexer"
  // (e.g. "bf16/fp8"; engine/cache_formats.h): part of what a cached block
  // holds, so of the prefix cache's key.
  std::vector<std::string> cache_dtypes;
};

class Pipeline {
 public:
  struct Callbacks {
    // Each micro-batch's result, in send order, from a pipeline thread.
    std::function<void(MicroBatchResult)> on_result;
    // The pipeline broke (a stage unreachable, a stream ended): results of
    // micro-batches in flight will not come. Called at most once per Connect.
    std::function<void(absl::Status)> on_failure;
  };

  virtual ~Pipeline() = default;
  // (Re)connects: handshakes with every stage and opens the streams, as a
  // new epoch (stages drop all per-sequence state). Blocking; call without
  // locks held.
  virtual absl::StatusOr<PipelineInfo> Connect(Callbacks callbacks, absl::Duration timeout) = 0;
  // Queues a plan for stage 0. Never blocks.
  virtual void Send(MicroBatchPlan plan) = 0;
  // Closes the streams; no callbacks after it returns.
  virtual void Close() = 0;
  // Closes and makes a Connect in progress (and any later one) give up soon.
  virtual void Shutdown() { Close(); }
};

}  // namespace spar

#endif  // SPAR_SERVICES_SCHEDULER_PIPELINE_H_
