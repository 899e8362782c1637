// The scheduler daemon's engine: admission, continuous batching over the
// pipeline, streaming to clients. It owns the SchedulerCore (sequence and
// block state), the RequestTracker (text, stop strings, usage) and the
// Pipeline, and keeps them consistent under one mutex; every entry point is
// short and non-blocking, so gRPC reactions may call it. A loop thread only
// handles time: deadlines, micro-batches stuck in the pipeline, and
// reconnecting after a pipeline failure.
//
// Thread-safe.
#ifndef SPAR_SERVICES_SCHEDULER_SCHEDULER_H_
#define SPAR_SERVICES_SCHEDULER_SCHEDULER_H_

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/model_config.h"
#include "services/scheduler/generation_convert.h"
#include "services/scheduler/generation_types.h"
#include "services/scheduler/pipeline.h"
#include "services/scheduler/request_observer.h"
#include "services/scheduler/request_tracker.h"
#include "services/scheduler/scheduler_core.h"
#include "text/tokenizer.h"

namespace spar {

struct SchedulerOptions {
  std::string served_model_name = "spar";
  std::string model_path;
  BatchLimits limits;
  int max_in_flight = 0;       // 0: one per stage
  size_t max_waiting = 256;    // admission queue bound (sequences)
  int64_t max_model_len = 0;   // 0: the model's max_position_embeddings
  bool balance = true;
  // Automatic prefix caching (--enable-prefix-caching, on by default).
  bool enable_prefix_caching = true;
  int max_n = 16;
  absl::Duration connect_timeout = absl::Minutes(10);
  // A micro-batch not back after this long fails the pipeline (a stage is
  // stuck or gone); its requests end with UNAVAILABLE.
  absl::Duration step_timeout = absl::Minutes(2);
  absl::Duration reconnect_interval = absl::Seconds(1);
  // Each reconnection attempt after a failure gives up after this long.
  absl::Duration reconnect_timeout = absl::Seconds(5);
  // Told about every request's progress (metrics); may be null. Must
  // outlive the scheduler.
  RequestObserver* observer = nullptr;
};

struct LoadInfo {
  int running_requests = 0;
  int waiting_requests = 0;
  CoreStats core;
  size_t max_waiting = 0;
  bool ready = false;     // the pipeline is connected
  bool draining = false;  // BeginDrain() was called
  size_t active_requests = 0;
  bool prefix_caching = false;
  std::string cache_dtype;  // the stages' cache formats, "latent/indexer" each, comma separated
};

struct ModelInfo {
  std::string served_model_name, model_path, model_type;
  std::vector<std::string> architectures;
  int64_t vocab_size = 0, max_model_len = 0, total_blocks = 0;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id;
  int stages = 0;
  int64_t max_batch_tokens = 0;
  int max_running = 0;
  bool has_tokenizer = false;
};

class Scheduler {
 public:
  // `tokenizer` may be null (token ids in and out only).
  Scheduler(SchedulerOptions options, ModelConfig config, std::unique_ptr<Tokenizer> tokenizer,
            std::unique_ptr<Pipeline> pipeline);
  ~Scheduler();

  // Connects the pipeline (blocking, up to options.connect_timeout) and
  // starts the loop thread. On failure the loop keeps retrying in the
  // background and the error is returned (the scheduler is not ready).
  absl::Status Start();
  // Ends every request (UNAVAILABLE), closes the pipeline, joins threads.
  // May be called while Start() is still connecting (it then gives up).
  void Stop();

  // Admits a request; its updates go to `sink`. Returns the request id.
  // Errors: INVALID_ARGUMENT (bad field, prompt too long), ALREADY_EXISTS
  // (request id in use), RESOURCE_EXHAUSTED (queue full, cannot fit the KV
  // cache), UNAVAILABLE (pipeline not connected).
  absl::StatusOr<std::string> Submit(GenerateParams params, std::shared_ptr<GenerationSink> sink);
  // Aborts requests (their streams end CANCELLED); returns those found.
  std::vector<std::string> Abort(const std::vector<std::string>& request_ids);
  // The client of `request_id` went away: abort it, free its blocks.
  void Cancel(const std::string& request_id);

  // Graceful shutdown, first step: from now on Submit refuses new requests
  // with UNAVAILABLE and ready() is false; admitted requests go on.
  void BeginDrain();
  // Waits until no request is active or `timeout` passes; true when idle.
  // Stop() afterwards ends whatever is left.
  bool WaitUntilIdle(absl::Duration timeout);

  LoadInfo Load() const;
  ModelInfo Info() const;
  const ApiLimits& limits() const { return limits_; }
  // The model's tokenizer (null: token ids only); lives as long as this.
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  // Ready for new requests: the pipeline is connected and not draining.
  bool ready() const;
  bool draining() const;

 private:
  absl::StatusOr<std::string> SubmitAdmitted(GenerateParams params, std::shared_ptr<GenerationSink> sink);
  // A text prompt's ids; `enough` ids already prove it cannot fit the
  // context, so an encoder may stop there (the result is then longer than
  // the context, never shorter than the truth below it).
  absl::StatusOr<std::vector<int32_t>> EncodePrompt(const std::string& text, size_t enough) const;
  void OnResult(MicroBatchResult result);
  void OnFailure(absl::Status status);
  // Sends every micro-batch the core will form now. Requires mu_.
  void PumpLocked();
  void HandleLocked(const std::vector<SeqEvent>& events);
  void FailLocked(const absl::Status& status);
  absl::Status ConnectOnce(absl::Duration timeout);
  void Loop();

  const SchedulerOptions options_;
  const ModelConfig config_;
  const std::unique_ptr<Tokenizer> tokenizer_;
  const std::unique_ptr<Pipeline> pipeline_;
  ApiLimits limits_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unique_ptr<SchedulerCore> core_;  // null until connected
  RequestTracker tracker_;
  PipelineInfo pipeline_info_;
  bool ready_ = false;
  bool draining_ = false;
  bool stopping_ = false;
  bool reconnect_ = false;
  uint64_t next_request_ = 1;
  // The counters of earlier cores (each pipeline connection starts one).
  CoreStats before_;
  std::thread loop_;
};

}  // namespace spar

#endif  // SPAR_SERVICES_SCHEDULER_SCHEDULER_H_
