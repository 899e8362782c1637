// spar.v1.Worker on the callback API: a thin adapter that converts between
// the wire and WorkerRuntime and never blocks in a reaction (Configure is
// answered from the compute thread when it has been applied; Pipeline reads
// only enqueue; Results writes are fed by the compute thread).
#ifndef SPAR_SERVICES_WORKER_WORKER_SERVICE_H_
#define SPAR_SERVICES_WORKER_WORKER_SERVICE_H_

#include "services/worker/worker_runtime.h"
#include "spar/v1/worker.grpc.pb.h"

namespace spar {

class WorkerService final : public v1::Worker::CallbackService {
 public:
  explicit WorkerService(WorkerRuntime* runtime) : runtime_(runtime) {}

  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext* ctx, const v1::GetInfoRequest* request,
                                    v1::WorkerInfo* response) override;
  grpc::ServerUnaryReactor* Configure(grpc::CallbackServerContext* ctx, const v1::ConfigureRequest* request,
                                      v1::ConfigureResponse* response) override;
  grpc::ServerWriteReactor<v1::TpGroupEvent>* JoinTpGroup(grpc::CallbackServerContext* ctx,
                                                          const v1::JoinTpGroupRequest* request) override;
  grpc::ServerReadReactor<v1::MicroBatch>* Pipeline(grpc::CallbackServerContext* ctx,
                                                    v1::PipelineSummary* response) override;
  grpc::ServerWriteReactor<v1::MicroBatchResult>* Results(grpc::CallbackServerContext* ctx,
                                                          const v1::ResultsRequest* request) override;
  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* ctx, const v1::GetStatsRequest* request,
                                     v1::WorkerStats* response) override;

 private:
  WorkerRuntime* runtime_;
};

}  // namespace spar

#endif  // SPAR_SERVICES_WORKER_WORKER_SERVICE_H_
