#include "services/http/openai_generate.h"

#include <optional>
#include <random>

#include "absl/strings/str_cat.h"
#include "services/http/api_error.h"
#include "services/http/generation_relay.h"
#include "services/http/openai_request.h"
#include "services/http/openai_response.h"
#include "services/http/request_id.h"
#include "services/http/token_strings.h"

namespace spar::http {
namespace {

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string SseEvent(const Json& j) { return absl::StrCat("data: ", Dump(j), "\n\n"); }

ApiError ModelNotFound(const std::string& wanted, const std::string& served) {
  ApiError e = InvalidRequest(
      absl::StrCat("The model `", wanted, "` does not exist (this server serves `", served, "`)"), "model");
  e.http_status = 404;
  e.code = "model_not_found";
  return e;
}

// What the relay's callbacks share: touched only on the connection's
// strand once the relay started.
struct Answer {
  explicit Answer(std::atomic<int>* active) : guard(active) {}
  ActiveRequestGuard guard;
  std::shared_ptr<TokenStrings> tokens;
  std::unique_ptr<ResponseBuilder> builder;
  std::optional<absl::Status> error;  // the first prompt that failed
  std::string request_id;             // echoed in X-Request-Id
  bool stream = false;
  bool include_usage = false;

  // Feeds `events` to the builder; returns the SSE text of the chunks.
  std::string Consume(GenerationRelay& relay, std::vector<UpdateStreams::Event> events) {
    std::string sse;
    for (UpdateStreams::Event& e : events) {
      if (e.update) {
        for (const Json& chunk : builder->Add(e.source, *e.update)) {
          if (stream) sse += SseEvent(chunk);
        }
      } else if (e.closed && !e.closed->ok() && !error) {
        // One prompt failed: the answer is an error, so stop the rest.
        error = *e.closed;
        relay.CancelAll();
      }
    }
    return sse;
  }

  void Finish(HttpResponder& out) {
    if (!stream) {
      HttpResponse res = error ? StatusResponse(*error) : MakeResponse(200, Dump(builder->Response()));
      res.headers.Add("X-Request-Id", request_id);
      out.Send(std::move(res));
      return;
    }
    std::string tail;
    if (error) {
      // After the 200 went out, an error travels as an event the OpenAI
      // clients raise as APIError (vLLM does the same).
      tail = SseEvent(Json::parse(ApiErrorJson(ApiErrorFromStatus(*error)), nullptr, false));
    } else if (include_usage) {
      tail = SseEvent(builder->UsageChunk());
    }
    tail += "data: [DONE]\n\n";
    out.Write(std::move(tail));
    out.EndStream();
  }
};

}  // namespace

void HandleGenerate(const GenerateContext& ctx, bool chat, HttpRequest req, std::shared_ptr<HttpResponder> out) {
  Scheduler* const scheduler = ctx.scheduler;
  if ((ctx.draining != nullptr && *ctx.draining) || scheduler->draining()) {
    return out->Send(
        ServerErrorResponse(503, "the server is draining (shutting down); retry on another replica", "draining"));
  }
  auto client_id = ClientRequestId(req.headers.Get("X-Request-Id"));
  if (!client_id.ok()) return out->Send(StatusResponse(client_id.status()));
  auto request = chat ? ParseChatRequest(req.body) : ParseCompletionRequest(req.body, ctx.max_prompts);
  req.body = std::string();  // the prompts are in `request` now
  if (!request.ok()) return out->Send(StatusResponse(request.status()));
  const ApiLimits& limits = scheduler->limits();
  if (!request->model.empty() && request->model != limits.served_model_name) {
    return out->Send(ApiErrorResponse(ModelNotFound(request->model, limits.served_model_name)));
  }
  auto params = BuildGenerateParams(*request, ctx.chat_template, limits);
  if (!params.ok()) return out->Send(StatusResponse(params.status()));
  if (!scheduler->ready()) {
    return out->Send(ServerErrorResponse(503, "not ready: the pipeline of workers is not connected", "not_ready"));
  }

  const std::string base_id = client_id->empty() ? RandomRequestId() : *client_id;
  auto answer = std::make_shared<Answer>(ctx.active);
  answer->request_id = base_id;
  answer->stream = request->stream;
  answer->include_usage = request->include_usage;
  ResponseOptions ro = ResponseOptions::For(*request, absl::StrCat(chat ? "chatcmpl-" : "cmpl-", base_id),
                                            limits.served_model_name, absl::ToUnixSeconds(absl::Now()));
  if (chat) {
    const Json& tools = request->template_options.tools;
    ro.chat_syntax = ChatSyntaxFor(ctx.chat_parsers, tools.is_array() && !tools.empty(), request->tool_choice_none,
                                   (*params)[0].text.value_or(""));
    // The parsers read the tags (<think>, <tool_call>, …), special tokens
    // that skip_special_tokens would drop from the text (as vLLM's do).
    if (ro.chat_syntax.active()) (*params)[0].skip_special_tokens = false;
    if (request->constraint) {
      absl::Status s = ApplyOutputConstraint(*request->constraint, ro.chat_syntax, &(*params)[0]);
      if (!s.ok()) return out->Send(StatusResponse(s));
    }
  }
  answer->tokens = std::make_shared<TokenStrings>(scheduler->tokenizer());
  answer->builder = std::make_unique<ResponseBuilder>(ro, answer->tokens.get());
  for (size_t p = 0; p < params->size(); ++p) {
    GenerateParams& gp = (*params)[p];
    if (request->echo) {
      std::string text;
      if (gp.text) {
        text = *gp.text;
      } else if (scheduler->tokenizer() != nullptr) {
        text = scheduler->tokenizer()->Decode(gp.prompt_ids).value_or("");
      }
      answer->builder->SetEchoText(static_cast<int>(p), std::move(text));
    }
    gp.request_id = params->size() > 1 ? absl::StrCat(base_id, "-", p) : base_id;
  }

  auto relay = GenerationRelay::Create(scheduler, out, static_cast<int>(params->size()));
  if (absl::Status s = relay->Submit(std::move(*params)); !s.ok()) return out->Send(StatusResponse(s));
  if (request->stream) {
    HttpResponse head;
    head.content_type = "text/event-stream";
    head.headers.Add("X-Request-Id", base_id);
    head.headers.Add("Cache-Control", "no-cache");
    head.headers.Add("X-Accel-Buffering", "no");  // proxies must not hold the stream back
    out->StartStream(std::move(head));
  }
  relay->Start(
      [answer](GenerationRelay& r, std::vector<UpdateStreams::Event> events) {
        std::string sse = answer->Consume(r, std::move(events));
        if (!sse.empty()) r.responder().Write(std::move(sse));
      },
      [answer](GenerationRelay& r) { answer->Finish(r.responder()); });
}

}  // namespace spar::http
