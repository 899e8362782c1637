#include "services/scheduler/generation_service.h"

#include <chrono>
#include <memory>
#include <mutex>

#include "services/common/grpc_status.h"
#include "services/common/stream_writer.h"
#include "services/scheduler/generation_convert.h"
#include "services/security/grpc_auth.h"

namespace spar {
namespace {

// Scheduler updates -> serialized GenerateResponse messages on the call's
// stream.
class StreamSink : public GenerationSink {
 public:
  explicit StreamSink(std::shared_ptr<StreamHandle<grpc::ByteBuffer>> handle) : handle_(std::move(handle)) {}
  bool Send(GenerationUpdate update) override {
    v1::GenerateResponse response;
    UpdateToProto(update, &response);
    grpc::ByteBuffer bytes;
    bool own_buffer = false;
    if (!grpc::SerializationTraits<v1::GenerateResponse>::Serialize(response, &bytes, &own_buffer).ok()) return false;
    return handle_->Push(std::move(bytes));
  }
  void Close(const absl::Status& status) override { handle_->Finish(ToGrpcStatus(status)); }

 private:
  std::shared_ptr<StreamHandle<grpc::ByteBuffer>> handle_;
};

absl::StatusOr<v1::GenerateRequest> ParseWireRequest(const grpc::ByteBuffer& bytes) {
  grpc::ByteBuffer copy(bytes);  // Deserialize consumes its buffer (slices are shared, not copied)
  v1::GenerateRequest request;
  if (!grpc::SerializationTraits<v1::GenerateRequest>::Deserialize(&copy, &request).ok()) {
    return absl::InvalidArgumentError(
        "the request is not a valid spar.v1.GenerateRequest: malformed protobuf, or a string field (text, "
        "request_id, model, stop_strings, chat) that is not valid UTF-8");
  }
  return request;
}

// The request id, known once the scheduler admitted the request; the
// cancellation callback may run before that.
struct CancelState {
  std::mutex mu;
  std::string request_id;
  bool cancelled = false;
};

}  // namespace

absl::Status GenerationService::Authorize(const grpc::CallbackServerContext& ctx) const {
  return api_keys_ == nullptr ? absl::OkStatus() : CheckGrpcAuthorization(*api_keys_, ctx);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::Generate(grpc::CallbackServerContext* ctx,
                                                                        const grpc::ByteBuffer* bytes) {
  auto* reactor = new QueuedWriteReactor<grpc::ByteBuffer>();
  if (absl::Status auth = Authorize(*ctx); !auth.ok()) {
    reactor->handle()->Finish(ToGrpcStatus(auth));
    return reactor;
  }
  auto request = ParseWireRequest(*bytes);
  if (!request.ok()) {
    reactor->handle()->Finish(ToGrpcStatus(request.status()));
    return reactor;
  }
  auto params = ParseGenerateRequest(*request, scheduler_->limits(), chat_template_);
  if (!params.ok()) {
    reactor->handle()->Finish(ToGrpcStatus(params.status()));
    return reactor;
  }
  const auto deadline = ctx->deadline();
  if (deadline != std::chrono::system_clock::time_point::max()) params->deadline = absl::FromChrono(deadline);
  auto cancel = std::make_shared<CancelState>();
  Scheduler* scheduler = scheduler_;
  reactor->set_on_cancel([cancel, scheduler] {
    std::string id;
    {
      std::lock_guard<std::mutex> lock(cancel->mu);
      cancel->cancelled = true;
      id = cancel->request_id;
    }
    if (!id.empty()) scheduler->Cancel(id);
  });
  auto id = scheduler_->Submit(std::move(*params), std::make_shared<StreamSink>(reactor->handle()));
  if (!id.ok()) {
    reactor->handle()->Finish(ToGrpcStatus(id.status()));
    return reactor;
  }
  bool cancelled;
  {
    std::lock_guard<std::mutex> lock(cancel->mu);
    cancel->request_id = *id;
    cancelled = cancel->cancelled;
  }
  if (cancelled) scheduler_->Cancel(*id);  // the client left while we submitted
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::Abort(grpc::CallbackServerContext* ctx, const v1::AbortRequest* request,
                                                   v1::AbortResponse* response) {
  if (absl::Status auth = Authorize(*ctx); !auth.ok()) {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpcStatus(auth));
    return reactor;
  }
  std::vector<std::string> ids(request->request_ids().begin(), request->request_ids().end());
  for (const std::string& id : scheduler_->Abort(ids)) response->add_aborted_request_ids(id);
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::GetModelInfo(grpc::CallbackServerContext* ctx,
                                                          const v1::GetModelInfoRequest*,
                                                          v1::GetModelInfoResponse* r) {
  if (absl::Status auth = Authorize(*ctx); !auth.ok()) {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpcStatus(auth));
    return reactor;
  }
  const ModelInfo m = scheduler_->Info();
  r->set_served_model_name(m.served_model_name);
  r->set_model_path(m.model_path);
  r->set_model_type(m.model_type);
  for (const auto& a : m.architectures) r->add_architectures(a);
  r->set_vocab_size(m.vocab_size);
  r->set_max_context_length(m.max_model_len);
  for (int64_t id : m.eos_token_ids) r->add_eos_token_ids(static_cast<int32_t>(id));
  if (m.bos_token_id) r->set_bos_token_id(static_cast<int32_t>(*m.bos_token_id));
  r->set_supports_text_input(m.has_tokenizer);
  r->set_supports_token_ids_input(true);
  r->set_kv_block_size(kCacheBlockTokens);
  r->set_total_kv_blocks(m.total_blocks);
  r->set_pipeline_stages(m.stages);
  r->set_tensor_parallel_size(1);
  r->set_max_batched_tokens(static_cast<int32_t>(m.max_batch_tokens));
  r->set_max_running_requests(m.max_running);
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::GetLoad(grpc::CallbackServerContext* ctx, const v1::GetLoadRequest*,
                                                     v1::GetLoadResponse* r) {
  if (absl::Status auth = Authorize(*ctx); !auth.ok()) {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpcStatus(auth));
    return reactor;
  }
  const LoadInfo l = scheduler_->Load();
  r->set_num_running_requests(l.running_requests);
  r->set_num_waiting_requests(l.waiting_requests);
  r->set_used_kv_blocks(l.core.used_blocks);
  r->set_total_kv_blocks(l.core.total_blocks);
  r->set_kv_cache_usage(l.core.total_blocks > 0 ? static_cast<double>(l.core.used_blocks) / l.core.total_blocks : 0);
  r->set_micro_batches_in_flight(static_cast<int32_t>(l.core.in_flight));
  r->set_max_waiting_requests(static_cast<int32_t>(l.max_waiting));
  r->set_num_preemptions(l.core.preemptions);
  r->set_num_micro_batches(l.core.micro_batches);
  r->set_pipeline_ready(l.ready);
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace spar
