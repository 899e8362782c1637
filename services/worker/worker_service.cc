#include "services/worker/worker_service.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "services/common/grpc_status.h"
#include "services/common/stream_writer.h"
#include "services/security/worker_plane.h"

namespace spar {
namespace {

// Reads micro-batches of one upstream stream and hands them to the runtime.
class PipelineReader : public grpc::ServerReadReactor<v1::MicroBatch> {
 public:
  PipelineReader(WorkerRuntime* runtime, v1::PipelineSummary* summary) : runtime_(runtime), summary_(summary) {
    runtime_->UpstreamOpened();
    next_ = std::make_unique<v1::MicroBatch>();
    StartRead(next_.get());
  }
  void OnReadDone(bool ok) override {
    if (!ok) {  // upstream closed the stream (or went away)
      summary_->set_micro_batches(count_);
      Finish(grpc::Status::OK);
      return;
    }
    ++count_;
    runtime_->Enqueue(std::move(next_));
    next_ = std::make_unique<v1::MicroBatch>();
    StartRead(next_.get());
  }
  void OnDone() override {
    runtime_->UpstreamClosed();
    delete this;
  }

 private:
  WorkerRuntime* runtime_;
  v1::PipelineSummary* summary_;
  std::unique_ptr<v1::MicroBatch> next_;
  uint64_t count_ = 0;
};

// A unary reactor already finished with `status` (a refused caller).
grpc::ServerUnaryReactor* Refuse(grpc::CallbackServerContext* ctx, const absl::Status& status) {
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// Refuses a client stream without reading it.
class RefusedReader : public grpc::ServerReadReactor<v1::MicroBatch> {
 public:
  explicit RefusedReader(const absl::Status& status) { Finish(ToGrpcStatus(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

// Every RPC first checks that the caller belongs to the worker plane
// (its token; certificates are checked by TLS before a call exists).
grpc::ServerUnaryReactor* WorkerService::GetInfo(grpc::CallbackServerContext* ctx, const v1::GetInfoRequest*,
                                                 v1::WorkerInfo* response) {
  if (absl::Status s = ProcessWorkerPlane().CheckCaller(*ctx); !s.ok()) return Refuse(ctx, s);
  *response = runtime_->Info();
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* WorkerService::Configure(grpc::CallbackServerContext* ctx,
                                                   const v1::ConfigureRequest* request,
                                                   v1::ConfigureResponse* response) {
  if (absl::Status s = ProcessWorkerPlane().CheckCaller(*ctx); !s.ok()) return Refuse(ctx, s);
  auto* reactor = ctx->DefaultReactor();
  runtime_->Configure(*request, [reactor, response](absl::StatusOr<v1::WorkerInfo> info) {
    if (info.ok()) *response->mutable_info() = std::move(*info);
    reactor->Finish(ToGrpcStatus(info.status()));
  });
  return reactor;
}

grpc::ServerUnaryReactor* WorkerService::JoinTpGroup(grpc::CallbackServerContext* ctx,
                                                     const v1::JoinTpGroupRequest* request,
                                                     v1::JoinTpGroupResponse*) {
  if (absl::Status s = ProcessWorkerPlane().CheckCaller(*ctx); !s.ok()) return Refuse(ctx, s);
  auto* reactor = ctx->DefaultReactor();
  if (request->tp_size() <= 1) {
    reactor->Finish(grpc::Status::OK);  // a group of one: nothing to join
  } else {
    reactor->Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                                 "tensor parallelism over NCCL is not implemented yet (tp_size must be 1)"));
  }
  return reactor;
}

grpc::ServerReadReactor<v1::MicroBatch>* WorkerService::Pipeline(grpc::CallbackServerContext* ctx,
                                                                 v1::PipelineSummary* response) {
  if (absl::Status s = ProcessWorkerPlane().CheckCaller(*ctx); !s.ok()) return new RefusedReader(s);
  return new PipelineReader(runtime_, response);
}

grpc::ServerWriteReactor<v1::MicroBatchResult>* WorkerService::Results(grpc::CallbackServerContext* ctx,
                                                                       const v1::ResultsRequest* request) {
  auto* reactor = new QueuedWriteReactor<v1::MicroBatchResult>();
  if (absl::Status s = ProcessWorkerPlane().CheckCaller(*ctx); !s.ok()) {
    reactor->handle()->Finish(ToGrpcStatus(s));
    return reactor;
  }
  const uint64_t epoch = runtime_->epoch();
  if (!runtime_->is_last_stage() || request->epoch() != epoch) {
    reactor->handle()->Finish(grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        runtime_->is_last_stage()
            ? absl::StrCat("results of epoch ", request->epoch(), " requested; this stage is at epoch ", epoch)
            : std::string("results are published by the last stage only")));
    return reactor;
  }
  runtime_->results()->Attach(reactor->handle());
  return reactor;
}

grpc::ServerUnaryReactor* WorkerService::GetStats(grpc::CallbackServerContext* ctx, const v1::GetStatsRequest* request,
                                                  v1::WorkerStats* response) {
  if (absl::Status s = ProcessWorkerPlane().CheckCaller(*ctx); !s.ok()) return Refuse(ctx, s);
  *response = runtime_->Stats(request->reset());
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace spar
