#include "services/http/anthropic_response.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace spar::http {
namespace {

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

}  // namespace

std::string SseText(const SseEvent& e) { return absl::StrCat("event: ", e.name, "\ndata: ", Dump(e.data), "\n\n"); }

AnthropicMessageBuilder::AnthropicMessageBuilder(std::string id, std::string model, ChatOutputSyntax syntax,
                                                 const Json* tools)
    : id_(std::move(id)),
      model_(std::move(model)),
      stream_(syntax, tools, absl::StrCat("toolu_", id_.substr(4), "_")),
      thinking_expected_(syntax.reasoning && syntax.starts_in_reasoning) {}

// With thinking on, the message opens with a thinking block even when the
// model closed its reasoning at once (as Anthropic's always has one).
void AnthropicMessageBuilder::EnsureThinking(std::vector<SseEvent>* events) {
  if (!thinking_expected_) return;
  thinking_expected_ = false;
  if (content_.empty()) {
    OpenBlock({{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}, Open::kThinking, events);
    CloseBlock(events);
  }
}

std::vector<SseEvent> AnthropicMessageBuilder::Start(int input_tokens) {
  input_tokens_ = input_tokens;
  Json message = {{"id", id_},
                  {"type", "message"},
                  {"role", "assistant"},
                  {"model", model_},
                  {"content", Json::array()},
                  {"stop_reason", nullptr},
                  {"stop_sequence", nullptr},
                  {"usage", {{"input_tokens", input_tokens}, {"output_tokens", 0}}}};
  return {{"message_start", {{"type", "message_start"}, {"message", std::move(message)}}},
          {"ping", {{"type", "ping"}}}};
}

void AnthropicMessageBuilder::CloseBlock(std::vector<SseEvent>* events) {
  if (open_ == Open::kNone) return;
  events->push_back({"content_block_stop", {{"type", "content_block_stop"}, {"index", content_.size() - 1}}});
  open_ = Open::kNone;
}

void AnthropicMessageBuilder::OpenBlock(Json block, Open kind, std::vector<SseEvent>* events) {
  CloseBlock(events);
  content_.push_back(block);
  events->push_back({"content_block_start",
                     {{"type", "content_block_start"}, {"index", content_.size() - 1}, {"content_block", std::move(block)}}});
  open_ = kind;
}

void AnthropicMessageBuilder::Feed(const Json& delta, bool final, std::vector<SseEvent>* events) {
  if (const auto it = delta.find("reasoning_content"); it != delta.end()) {
    thinking_expected_ = false;
    if (open_ != Open::kThinking) OpenBlock({{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}, Open::kThinking, events);
    const std::string piece = it->get<std::string>();
    content_.back()["thinking"] = content_.back()["thinking"].get<std::string>() + piece;
    events->push_back({"content_block_delta",
                       {{"type", "content_block_delta"},
                        {"index", content_.size() - 1},
                        {"delta", {{"type", "thinking_delta"}, {"thinking", piece}}}}});
  }
  if (const auto it = delta.find("content"); it != delta.end()) {
    // Trailing whitespace waits: before a tool call (the newline a
    // template writes there) or at the end it is not text.
    const std::string piece = pending_space_ + it->get<std::string>();
    size_t body = piece.size();
    while (body > 0 && absl::ascii_isspace(static_cast<unsigned char>(piece[body - 1]))) --body;
    pending_space_ = piece.substr(body);
    if (body > 0) {
      EnsureThinking(events);
      if (open_ != Open::kText) OpenBlock({{"type", "text"}, {"text", ""}}, Open::kText, events);
      const std::string text = piece.substr(0, body);
      content_.back()["text"] = content_.back()["text"].get<std::string>() + text;
      events->push_back({"content_block_delta",
                         {{"type", "content_block_delta"},
                          {"index", content_.size() - 1},
                          {"delta", {{"type", "text_delta"}, {"text", text}}}}});
    }
  }
  if (const auto it = delta.find("tool_calls"); it != delta.end()) {
    pending_space_.clear();
    EnsureThinking(events);
    for (const Json& call : *it) {
      called_tools_ = true;
      const std::string args = call["function"]["arguments"].get<std::string>();
      Json input = Json::parse(args, nullptr, /*allow_exceptions=*/false);
      if (!input.is_object()) input = Json::object();
      OpenBlock({{"type", "tool_use"}, {"id", call["id"]}, {"name", call["function"]["name"]}, {"input", Json::object()}},
                Open::kText, events);
      content_.back()["input"] = input;
      events->push_back({"content_block_delta",
                         {{"type", "content_block_delta"},
                          {"index", content_.size() - 1},
                          {"delta", {{"type", "input_json_delta"}, {"partial_json", Dump(input)}}}}});
      CloseBlock(events);
    }
  }
  if (final) pending_space_.clear();
}

std::vector<SseEvent> AnthropicMessageBuilder::Add(const GenerationUpdate& u) {
  std::vector<SseEvent> events;
  if (u.prompt) input_tokens_ = u.prompt->num_prompt_tokens;
  text_ += u.output.text;
  output_tokens_ += static_cast<int>(u.output.token_ids.size());
  if (u.usage) {
    input_tokens_ = u.usage->prompt_tokens;
    output_tokens_ = u.usage->completion_tokens;
  }
  const bool final = u.output.finish.has_value();
  Feed(stream_.Delta(text_, final), final, &events);
  if (final) {
    for (SseEvent& e : Finish(*u.output.finish)) events.push_back(std::move(e));
  }
  return events;
}

std::vector<SseEvent> AnthropicMessageBuilder::Finish(const FinishInfo& f) {
  std::vector<SseEvent> events;
  EnsureThinking(&events);
  CloseBlock(&events);
  finished_ = true;
  if (called_tools_) {
    stop_reason_ = "tool_use";
  } else if (f.reason == SeqFinishReason::kLength) {
    stop_reason_ = "max_tokens";
  } else if (f.stop_string) {
    stop_reason_ = "stop_sequence";
    stop_sequence_ = *f.stop_string;
  } else {
    stop_reason_ = "end_turn";
  }
  events.push_back({"message_delta",
                    {{"type", "message_delta"},
                     {"delta", {{"stop_reason", stop_reason_}, {"stop_sequence", stop_sequence_}}},
                     {"usage", {{"input_tokens", input_tokens_}, {"output_tokens", output_tokens_}}}}});
  events.push_back({"message_stop", {{"type", "message_stop"}}});
  return events;
}

Json AnthropicMessageBuilder::Message() const {
  return {{"id", id_},
          {"type", "message"},
          {"role", "assistant"},
          {"model", model_},
          {"content", content_},
          {"stop_reason", finished_ ? Json(stop_reason_) : Json(nullptr)},
          {"stop_sequence", stop_sequence_},
          {"usage", {{"input_tokens", input_tokens_}, {"output_tokens", output_tokens_}}}};
}

}  // namespace spar::http
