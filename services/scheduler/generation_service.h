// spar.v1.Generation on the callback API: a thin adapter. Generate parses
// and validates the request (generation_convert), hands it to the Scheduler
// with a sink that feeds a QueuedWriteReactor, and turns a client
// cancellation into Scheduler::Cancel; the other RPCs read the Scheduler.
// No reaction blocks.
#ifndef SPAR_SERVICES_SCHEDULER_GENERATION_SERVICE_H_
#define SPAR_SERVICES_SCHEDULER_GENERATION_SERVICE_H_

#include "services/scheduler/scheduler.h"
#include "spar/v1/generation.grpc.pb.h"

namespace spar {

class GenerationService final : public v1::Generation::CallbackService {
 public:
  explicit GenerationService(Scheduler* scheduler) : scheduler_(scheduler) {}

  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(grpc::CallbackServerContext* ctx,
                                                           const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* ctx, const v1::AbortRequest* request,
                                  v1::AbortResponse* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* ctx, const v1::GetModelInfoRequest* request,
                                         v1::GetModelInfoResponse* response) override;
  grpc::ServerUnaryReactor* GetLoad(grpc::CallbackServerContext* ctx, const v1::GetLoadRequest* request,
                                    v1::GetLoadResponse* response) override;

 private:
  Scheduler* scheduler_;
};

}  // namespace spar

#endif  // SPAR_SERVICES_SCHEDULER_GENERATION_SERVICE_H_
