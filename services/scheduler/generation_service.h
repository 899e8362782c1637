// spar.v1.Generation on the callback API: a thin adapter. Generate parses
// and validates the request (generation_convert; a chat input rendered by
// the server's chat template), hands it to the Scheduler
// with a sink that feeds a QueuedWriteReactor, and turns a client
// cancellation into Scheduler::Cancel; the other RPCs read the Scheduler.
// No reaction blocks. With API keys configured every RPC first checks the
// call's "authorization" metadata (UNAUTHENTICATED otherwise).
//
// Generate takes the request as raw bytes and parses it itself: gRPC 1.51's
// callback API answers a request that does not deserialize (malformed
// protobuf, a string field that is not UTF-8) with UNIMPLEMENTED and no
// message, which reads as "no such method"; here it is an INVALID_ARGUMENT
// that says what is wrong. Responses are serialized here for the same
// reason (a raw method is raw both ways).
#ifndef SPAR_SERVICES_SCHEDULER_GENERATION_SERVICE_H_
#define SPAR_SERVICES_SCHEDULER_GENERATION_SERVICE_H_

#include <grpcpp/support/byte_buffer.h>

#include "services/scheduler/scheduler.h"
#include "services/security/api_keys.h"
#include "spar/v1/generation.grpc.pb.h"
#include "text/chat_template.h"

namespace spar {

// The callback service with Generate raw and the other RPCs typed.
using GenerationServiceBase = v1::Generation::WithRawCallbackMethod_Generate<v1::Generation::WithCallbackMethod_Abort<
    v1::Generation::WithCallbackMethod_GetModelInfo<v1::Generation::WithCallbackMethod_GetLoad<v1::Generation::Service>>>>;

class GenerationService final : public GenerationServiceBase {
 public:
  // `api_keys` (may be null: no authentication) and `chat_template` (may
  // be null: chat inputs are refused with FAILED_PRECONDITION) must outlive
  // the service.
  explicit GenerationService(Scheduler* scheduler, const ApiKeys* api_keys = nullptr,
                             const ChatTemplate* chat_template = nullptr)
      : scheduler_(scheduler), api_keys_(api_keys), chat_template_(chat_template) {}

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* ctx, const v1::AbortRequest* request,
                                  v1::AbortResponse* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* ctx, const v1::GetModelInfoRequest* request,
                                         v1::GetModelInfoResponse* response) override;
  grpc::ServerUnaryReactor* GetLoad(grpc::CallbackServerContext* ctx, const v1::GetLoadRequest* request,
                                    v1::GetLoadResponse* response) override;

 private:
  absl::Status Authorize(const grpc::CallbackServerContext& ctx) const;

  Scheduler* scheduler_;
  const ApiKeys* api_keys_;
  const ChatTemplate* chat_template_;
};

}  // namespace spar

#endif  // SPAR_SERVICES_SCHEDULER_GENERATION_SERVICE_H_
