#include "services/worker/worker_service.h"

#include <memory>
#include <mutex>

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

// A tensor-parallel peer's membership: one event ("registered"), then the
// stream stays open until the peer goes away (or this server shuts down);
// its end is the membership's end.
class TpMemberStream : public grpc::ServerWriteReactor<v1::TpGroupEvent> {
 public:
  // Refused.
  explicit TpMemberStream(const absl::Status& status) { Finish(ToGrpcStatus(status)); }
  TpMemberStream(TpMembership* membership, int rank, uint64_t ticket, v1::TpGroupEvent event)
      : membership_(membership), rank_(rank), ticket_(ticket), event_(std::move(event)) {
    StartWrite(&event_);
  }
  void OnWriteDone(bool ok) override {
    if (!ok) FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "the peer went away"));
  }
  void OnCancel() override { FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "the peer went away")); }
  void OnDone() override {
    if (membership_ != nullptr) membership_->Leave(rank_, ticket_);
    delete this;
  }

 private:
  void FinishOnce(const grpc::Status& status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    Finish(status);
  }

  TpMembership* membership_ = nullptr;
  int rank_ = 0;
  uint64_t ticket_ = 0;
  v1::TpGroupEvent event_;
  std::mutex mu_;
  bool finished_ = false;
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

grpc::ServerWriteReactor<v1::TpGroupEvent>* WorkerService::JoinTpGroup(grpc::CallbackServerContext* ctx,
                                                                        const v1::JoinTpGroupRequest* request) {
  if (absl::Status s = ProcessWorkerPlane().CheckCaller(*ctx); !s.ok()) return new TpMemberStream(s);
  TpMembership* membership = runtime_->tp_membership();
  if (membership == nullptr) {
    return new TpMemberStream(absl::FailedPreconditionError(
        absl::StrCat("this worker is not the leader of a tensor-parallel group (rank ", runtime_->Info().shard().tp().rank(),
                     ", size ", runtime_->Info().shard().tp().size(), "): start peers with --tp-leader pointing at rank 0")));
  }
  if (request->port() < 1 || request->port() > 65535) {
    return new TpMemberStream(absl::InvalidArgumentError(absl::StrCat("port ", request->port(), " is not a port")));
  }
  std::string host = request->host();
  if (host.empty()) {
    auto caller = HostOfGrpcPeer(ctx->peer());
    if (!caller.ok()) return new TpMemberStream(caller.status());
    host = *caller;
  }
  const std::string address = absl::StrCat(host, ":", request->port());
  auto ticket = membership->Join(request->tp_rank(), request->tp_size(), address);
  if (!ticket.ok()) return new TpMemberStream(ticket.status());
  v1::TpGroupEvent event;
  event.set_tp_size(membership->size());
  event.set_message(absl::StrCat("registered as rank ", request->tp_rank(), " of ", membership->size(), " at ", address));
  return new TpMemberStream(membership, request->tp_rank(), *ticket, std::move(event));
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
