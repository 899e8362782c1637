// POST /v1/completions and /v1/chat/completions: the body is parsed and
// validated (openai_request.h), the prompts submitted to the scheduler,
// and their updates turned into the answer (openai_response.h) as they
// come (GenerationRelay): SSE chunks and `data: [DONE]` when streamed,
// one JSON body at the end otherwise. Runs on the HTTP server's worker
// pool (parsing and tokenizing may take a while); the answer is written
// from the connection's strand.
#ifndef SPAR_SERVICES_HTTP_OPENAI_GENERATE_H_
#define SPAR_SERVICES_HTTP_OPENAI_GENERATE_H_

#include <atomic>
#include <memory>

#include "services/http/chat_output.h"
#include "services/http/http_message.h"
#include "services/scheduler/scheduler.h"
#include "text/chat_template.h"

namespace spar::http {

struct GenerateContext {
  Scheduler* scheduler = nullptr;
  const ChatTemplate* chat_template = nullptr;  // null: chat requests are refused
  int max_prompts = 64;
  ChatParsers chat_parsers;
  const std::atomic<bool>* draining = nullptr;  // the API port's drain flag
  std::atomic<int>* active = nullptr;           // generation requests being answered
};

// Counts a generation request as active (GenerateContext::active) for as
// long as it is alive; any API's handler holds one.
class ActiveRequestGuard {
 public:
  explicit ActiveRequestGuard(std::atomic<int>* active) : active_(active) {
    if (active_ != nullptr) ++*active_;
  }
  ~ActiveRequestGuard() {
    if (active_ != nullptr) --*active_;
  }
  ActiveRequestGuard(const ActiveRequestGuard&) = delete;
  ActiveRequestGuard& operator=(const ActiveRequestGuard&) = delete;

 private:
  std::atomic<int>* active_;
};

void HandleGenerate(const GenerateContext& context, bool chat, HttpRequest request,
                    std::shared_ptr<HttpResponder> responder);

}  // namespace spar::http

#endif  // SPAR_SERVICES_HTTP_OPENAI_GENERATE_H_
