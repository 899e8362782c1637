// POST /v1/messages and /v1/messages/count_tokens: the Anthropic Messages
// API on the OpenAI API's port, a thin adapter over the same pieces —
// the request becomes chat messages and GenerateParams
// (anthropic_request.h), rendered with the model's chat template, submitted
// through a GenerationRelay, and the updates become a Message or its SSE
// events (anthropic_response.h). Errors have Anthropic's shape,
// {"type": "error", "error": {"type", "message"}}, with its types
// (invalid_request_error 400, authentication_error 401, permission_error
// 403, not_found_error 404, request_too_large 413, rate_limit_error 429,
// api_error 500, overloaded_error 503, timeout_error 504); after a stream
// started, an `error` event. Runs on the HTTP server's worker pool.
#ifndef SPAR_SERVICES_HTTP_ANTHROPIC_MESSAGES_H_
#define SPAR_SERVICES_HTTP_ANTHROPIC_MESSAGES_H_

#include <memory>

#include "absl/status/status.h"
#include "services/http/http_message.h"
#include "services/http/openai_generate.h"

namespace spar::http {

void HandleAnthropicMessages(const GenerateContext& context, HttpRequest request, std::shared_ptr<HttpResponder> out);
void HandleAnthropicCountTokens(const GenerateContext& context, HttpRequest request,
                                std::shared_ptr<HttpResponder> out);

// Anthropic's error body for a status (and its HTTP status).
HttpResponse AnthropicErrorResponse(const absl::Status& status);
HttpResponse AnthropicErrorResponse(int http_status, const std::string& message);
// {"type":"error","error":{...}} for an HTTP status and message.
std::string AnthropicErrorJson(int http_status, const std::string& message);

}  // namespace spar::http

#endif  // SPAR_SERVICES_HTTP_ANTHROPIC_MESSAGES_H_
