#include "services/scheduler/grpc_pipeline.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "services/common/daemon.h"
#include "services/common/grpc_status.h"
#include "services/common/worker_convert.h"

namespace spar {
namespace {
std::chrono::system_clock::time_point ToDeadline(absl::Time t) { return absl::ToChronoTime(t); }
}  // namespace

GrpcPipeline::GrpcPipeline(GrpcPipelineOptions options, ModelConfig config)
    : options_(std::move(options)), config_(std::move(config)) {
  for (const std::string& address : options_.workers) stubs_.push_back(v1::Worker::NewStub(CreateWorkerChannel(address)));
}

GrpcPipeline::~GrpcPipeline() { Close(); }

absl::StatusOr<v1::WorkerInfo> GrpcPipeline::WaitForWorker(size_t stage, absl::Time until) {
  absl::Status last = absl::UnavailableError("not tried");
  while (absl::Now() < until && !shutdown_) {
    grpc::ClientContext ctx;
    ctx.set_wait_for_ready(true);
    ctx.set_deadline(ToDeadline(std::min(until, absl::Now() + absl::Seconds(2))));
    v1::GetInfoRequest req;
    v1::WorkerInfo info;
    grpc::Status s = stubs_[stage]->GetInfo(&ctx, req, &info);
    if (s.ok()) return info;
    last = FromGrpcStatus(s);
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE && s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::UnavailableError(
      absl::StrCat("stage ", stage, " worker at ", options_.workers[stage], " is unreachable: ", last.message()));
}

absl::StatusOr<PipelineInfo> GrpcPipeline::Connect(Callbacks callbacks, absl::Duration timeout) {
  Close();
  if (shutdown_) return absl::UnavailableError("the pipeline is shut down");
  const absl::Time until = absl::Now() + timeout;
  const int stages = static_cast<int>(stubs_.size());
  if (stages == 0) return absl::InvalidArgumentError("no workers: pass the stage leaders' addresses");
  PipelineInfo info;
  info.num_stages = stages;
  if (!options_.stage_layers.empty()) {
    if (static_cast<int>(options_.stage_layers.size()) != stages) {
      return absl::InvalidArgumentError(absl::StrCat(options_.stage_layers.size(), " stage layer ranges for ", stages,
                                                     " workers"));
    }
    info.stage_layers = options_.stage_layers;
  } else {
    SPAR_ASSIGN_OR_RETURN(info.stage_layers, SplitLayers(config_, stages));
  }
  int64_t blocks = options_.num_blocks;
  for (int i = 0; i < stages; ++i) {
    SPAR_ASSIGN_OR_RETURN(v1::WorkerInfo w, WaitForWorker(i, until));
    if (options_.num_blocks == 0) {
      blocks = blocks == 0 ? w.shard().num_blocks() : std::min<int64_t>(blocks, w.shard().num_blocks());
    }
  }
  if (blocks < 1) return absl::FailedPreconditionError("the workers report no KV blocks");
  info.num_blocks = blocks;

  uint64_t epoch = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  epoch = std::max(epoch, last_epoch_ + 1);
  last_epoch_ = epoch;
  // Last stage first, so every stage's next stage is configured before it.
  for (int i = stages - 1; i >= 0; --i) {
    v1::ConfigureRequest req;
    req.set_epoch(epoch);
    req.set_stage_index(i);
    req.set_num_stages(stages);
    v1::ShardSpec* shard = req.mutable_shard();
    shard->set_model_path(options_.model_path);
    shard->set_first_layer(info.stage_layers[i].first);
    shard->set_last_layer(info.stage_layers[i].last);
    shard->set_num_blocks(blocks);
    shard->set_backend(options_.backend);
    // tp left at size 0: each stage leader runs its own tensor-parallel
    // group (the scheduler talks to leaders only).
    if (i + 1 < stages) req.set_next_stage_address(options_.workers[i + 1]);
    grpc::ClientContext ctx;
    ctx.set_wait_for_ready(true);
    ctx.set_deadline(ToDeadline(until));
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shutdown_) return absl::UnavailableError("the pipeline is shut down");
      connect_ctx_ = &ctx;  // Shutdown() cancels a long Configure (a worker still loading)
    }
    v1::ConfigureResponse resp;
    grpc::Status s = stubs_[i]->Configure(&ctx, req, &resp);
    {
      std::lock_guard<std::mutex> lock(mu_);
      connect_ctx_ = nullptr;
    }
    if (!s.ok()) {
      return absl::Status(FromGrpcStatus(s).code(),
                          absl::StrCat("configuring stage ", i, " at ", options_.workers[i], ": ", s.error_message()));
    }
    if (i == stages - 1) info.num_speculative_tokens = resp.info().num_speculative_tokens();
    info.cache_dtypes.insert(info.cache_dtypes.begin(), absl::StrCat(resp.info().shard().kv_cache_dtype(), "/",
                                                                     resp.info().shard().indexer_cache_dtype()));
  }

  {
    std::lock_guard<std::mutex> lock(mu_);
    callbacks_ = std::move(callbacks);
    closing_ = false;
    failed_ = false;
    epoch_ = epoch;
    queue_.clear();
    send_ctx_ = std::make_unique<grpc::ClientContext>();
    recv_ctx_ = std::make_unique<grpc::ClientContext>();
  }
  receiver_ = std::thread([this, epoch] { RunReceiver(epoch); });
  sender_ = std::thread([this, epoch] { RunSender(epoch); });
  monitor_ = std::thread([this, epoch] { RunMonitor(epoch); });
  SPAR_LOG(INFO) << "pipeline connected: " << stages << " stages (" << FormatStageLayers(info.stage_layers) << "), "
                 << blocks << " KV blocks, epoch " << epoch;
  return info;
}

void GrpcPipeline::Send(MicroBatchPlan plan) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(plan));
  }
  cv_.notify_one();
}

void GrpcPipeline::Fail(const absl::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_) return;
  }
  if (failed_.exchange(true)) return;
  SPAR_LOG(ERROR) << "pipeline failed: " << status;
  if (callbacks_.on_failure) callbacks_.on_failure(status);
}

void GrpcPipeline::RunSender(uint64_t epoch) {
  v1::PipelineSummary summary;
  std::unique_ptr<grpc::ClientWriter<v1::MicroBatch>> writer = stubs_[0]->Pipeline(send_ctx_.get(), &summary);
  for (;;) {
    MicroBatchPlan plan;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return closing_ || !queue_.empty(); });
      if (closing_) break;
      plan = std::move(queue_.front());
      queue_.pop_front();
    }
    v1::MicroBatch batch;
    PlanToProto(plan, epoch, &batch);
    if (!writer->Write(batch)) {
      grpc::Status s = writer->Finish();
      Fail(absl::UnavailableError(absl::StrCat("stage 0 at ", options_.workers[0],
                                               " stopped taking micro-batches: ", s.error_message())));
      return;
    }
  }
  writer->WritesDone();
  writer->Finish();
}

void GrpcPipeline::RunReceiver(uint64_t epoch) {
  v1::ResultsRequest req;
  req.set_epoch(epoch);
  std::unique_ptr<grpc::ClientReader<v1::MicroBatchResult>> reader = stubs_.back()->Results(recv_ctx_.get(), req);
  v1::MicroBatchResult result;
  while (reader->Read(&result)) {
    if (result.epoch() != epoch) continue;
    if (callbacks_.on_result) callbacks_.on_result(ResultFromProto(result));
  }
  grpc::Status s = reader->Finish();
  Fail(absl::UnavailableError(absl::StrCat("the results stream of the last stage (", options_.workers.back(),
                                           ") ended: ", s.ok() ? std::string("closed") : s.error_message())));
}

void GrpcPipeline::RunMonitor(uint64_t epoch) {
  std::vector<int> misses(stubs_.size(), 0);
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (monitor_cv_.wait_for(lock, std::chrono::milliseconds(500), [&] { return closing_; })) return;
    }
    for (size_t i = 0; i < stubs_.size(); ++i) {
      grpc::ClientContext ctx;
      ctx.set_deadline(ToDeadline(absl::Now() + absl::Seconds(1)));
      v1::WorkerInfo info;
      grpc::Status s = stubs_[i]->GetInfo(&ctx, v1::GetInfoRequest(), &info);
      if (!s.ok()) {
        // Two misses in a row: a busy worker may answer one probe late.
        if (++misses[i] >= 2) {
          Fail(absl::UnavailableError(
              absl::StrCat("stage ", i, " at ", options_.workers[i], " is unreachable: ", s.error_message())));
          return;
        }
        continue;
      }
      misses[i] = 0;
      if (info.epoch() != epoch) {
        Fail(absl::UnavailableError(absl::StrCat("stage ", i, " at ", options_.workers[i],
                                                 " restarted or was reconfigured (its caches are gone)")));
        return;
      }
    }
  }
}

void GrpcPipeline::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_ = true;
    if (connect_ctx_ != nullptr) connect_ctx_->TryCancel();
  }
  Close();
}

void GrpcPipeline::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
    if (send_ctx_) send_ctx_->TryCancel();
    if (recv_ctx_) recv_ctx_->TryCancel();
  }
  cv_.notify_all();
  monitor_cv_.notify_all();
  if (sender_.joinable()) sender_.join();
  if (receiver_.joinable()) receiver_.join();
  if (monitor_.joinable()) monitor_.join();
  std::lock_guard<std::mutex> lock(mu_);
  send_ctx_.reset();
  recv_ctx_.reset();
  queue_.clear();
}

}  // namespace spar
