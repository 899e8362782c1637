#include "services/http/openai_response.h"

#include <cmath>

#include "absl/strings/str_cat.h"


namespace spar::http {
namespace {

double SafeLogprob(float lp) {
  if (std::isnan(lp)) return -9999.0;
  return std::isinf(lp) ? -9999.0 : static_cast<double>(lp);
}

Json BytesJson(const std::string& bytes) {
  Json out = Json::array();
  for (unsigned char b : bytes) out.push_back(static_cast<int>(b));
  return out;
}

// Unicode code points of valid UTF-8 text (what Python's len() counts).
int64_t CodePoints(const std::string& text) {
  int64_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

const char* FinishReason(SeqFinishReason r) {
  switch (r) {
    case SeqFinishReason::kLength:
      return "length";
    case SeqFinishReason::kStop:
      return "stop";
    case SeqFinishReason::kAborted:
      return "abort";
  }
  return "stop";
}

// OpenAI's "tool_calls" when the model stopped after calling a tool.
const char* FinishReasonWithTools(const FinishInfo& f, bool called_tools) {
  return f.reason == SeqFinishReason::kStop && called_tools ? "tool_calls" : FinishReason(f.reason);
}

Json StopReason(const FinishInfo& f) {
  if (f.stop_string) return *f.stop_string;
  if (f.stop_token_id) return *f.stop_token_id;
  return nullptr;
}

}  // namespace

ResponseOptions ResponseOptions::For(const OpenAiRequest& r, std::string id, std::string model, int64_t created) {
  ResponseOptions o;
  o.kind = r.kind;
  o.id = std::move(id);
  o.model = std::move(model);
  o.created = created;
  o.n = r.params.n;
  o.num_prompts = r.kind == ApiKind::kChat ? 1 : static_cast<int>(r.text_prompts.size() + r.id_prompts.size());
  o.logprobs = r.logprobs;
  o.top_logprobs = r.top_logprobs;
  o.echo = r.echo;
  o.return_token_ids = r.return_token_ids;
  o.stream = r.stream;
  o.include_usage = r.include_usage;
  o.continuous_usage = r.continuous_usage;
  o.tools = r.template_options.tools;
  return o;
}

ResponseBuilder::ResponseBuilder(ResponseOptions options, const TokenStrings* tokens)
    : options_(std::move(options)),
      tokens_(tokens),
      choices_(static_cast<size_t>(options_.num_prompts * options_.n)),
      echo_(options_.num_prompts),
      prompt_tokens_(options_.num_prompts, 0),
      completion_tokens_(options_.num_prompts, -1) {
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    if (options_.kind == ApiKind::kChat && options_.chat_syntax.active()) {
      // Tool call ids: unique per response and choice, the same on a retry of the body.
      c.output = std::make_unique<ChatOutputStream>(
          options_.chat_syntax, &options_.tools,
          absl::StrCat("call_", absl::string_view(options_.id).substr(options_.id.find('-') + 1), "_", i, "_"));
    }
    c.logprobs = options_.kind == ApiKind::kChat
                     ? Json{{"content", Json::array()}}
                     : Json{{"tokens", Json::array()}, {"token_logprobs", Json::array()},
                            {"top_logprobs", Json::array()}, {"text_offset", Json::array()}};
  }
}

void ResponseBuilder::SetEchoText(int prompt, std::string text) { echo_[prompt] = std::move(text); }

Json ResponseBuilder::LogprobsOf(Choice& c, const SequenceUpdate& u) {
  const bool chat = options_.kind == ApiKind::kChat;
  Json out = chat ? Json{{"content", Json::array()}}
                  : Json{{"tokens", Json::array()}, {"token_logprobs", Json::array()},
                         {"top_logprobs", Json::array()}, {"text_offset", Json::array()}};
  for (size_t i = 0; i < u.token_ids.size(); ++i) {
    const int32_t id = u.token_ids[i];
    const std::string token = tokens_->Text(id);
    const double lp = i < u.logprobs.size() ? SafeLogprob(u.logprobs[i]) : 0.0;
    const auto* top = i < u.top.size() ? &u.top[i] : nullptr;
    if (chat) {
      Json entry = {{"token", token}, {"logprob", lp}, {"bytes", BytesJson(tokens_->Bytes(id))}};
      Json alternatives = Json::array();
      if (top != nullptr) {
        for (const auto& [alt, alt_lp] : *top) {
          alternatives.push_back({{"token", tokens_->Text(alt)},
                                  {"logprob", SafeLogprob(alt_lp)},
                                  {"bytes", BytesJson(tokens_->Bytes(alt))}});
        }
      }
      entry["top_logprobs"] = std::move(alternatives);
      out["content"].push_back(entry);
      c.logprobs["content"].push_back(std::move(entry));
    } else {
      // vLLM's form: the alternatives plus the sampled token, keyed by text.
      Json alternatives = Json::object();
      if (top != nullptr) {
        for (const auto& [alt, alt_lp] : *top) alternatives[tokens_->Text(alt)] = SafeLogprob(alt_lp);
      }
      alternatives[token] = lp;
      for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
        Json value = std::string(key) == "tokens"           ? Json(token)
                     : std::string(key) == "token_logprobs" ? Json(lp)
                     : std::string(key) == "top_logprobs"   ? alternatives
                                                            : Json(c.text_offset);
        out[key].push_back(value);
        c.logprobs[key].push_back(std::move(value));
      }
      c.text_offset += CodePoints(token);
    }
  }
  return out;
}

std::vector<Json> ResponseBuilder::Add(int prompt, const GenerationUpdate& update) {
  std::vector<Json> chunks;
  if (prompt < 0 || prompt >= options_.num_prompts) return chunks;
  if (update.prompt) prompt_tokens_[prompt] = update.prompt->num_prompt_tokens;
  if (update.usage) completion_tokens_[prompt] = update.usage->completion_tokens;
  const SequenceUpdate& u = update.output;
  if (u.index < 0 || u.index >= options_.n) return chunks;
  const int index = prompt * options_.n + u.index;
  Choice& c = choices_[index];
  if (update.prompt && options_.return_token_ids) {
    for (Choice* sibling = &choices_[prompt * options_.n]; sibling < &choices_[prompt * options_.n] + options_.n;
         ++sibling) {
      sibling->prompt_ids = update.prompt->prompt_ids;
    }
  }
  std::string text;
  const bool first = !c.started;
  if (first) {
    c.started = true;
    if (options_.echo) {
      text = echo_[prompt];
      c.text_offset = CodePoints(text);
    }
  }
  text += u.text;
  c.text += text;
  c.token_ids.insert(c.token_ids.end(), u.token_ids.begin(), u.token_ids.end());
  c.num_tokens += static_cast<int>(u.token_ids.size());
  Json logprobs = options_.logprobs && !u.token_ids.empty() ? LogprobsOf(c, u) : Json(nullptr);
  if (u.finish) c.finish = u.finish;

  if (!options_.stream) return chunks;

  const bool chat = options_.kind == ApiKind::kChat;
  if (chat && first) {
    // OpenAI opens every chat choice with the role, before any content.
    Json delta = {{"role", "assistant"}, {"content", ""}};
    Json choice = {{"index", index}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    if (options_.return_token_ids) choice["prompt_token_ids"] = c.prompt_ids;
    chunks.push_back(Chunk(std::move(choice)));
  }
  Json delta;
  if (c.output != nullptr) {
    delta = c.output->Delta(c.text, u.finish.has_value());
  } else if (chat) {
    delta = text.empty() ? Json::object() : Json{{"content", text}};
  }
  // A chat delta holds exactly what is new (also with the parsers, which may hold text back).
  if ((chat ? delta.empty() : text.empty()) && logprobs.is_null() && !u.finish) return chunks;
  Json choice = {{"index", index}};
  if (chat) {
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = logprobs;
  const bool called_tools = c.output != nullptr && c.output->CalledTools();
  choice["finish_reason"] = u.finish ? Json(FinishReasonWithTools(*u.finish, called_tools)) : Json(nullptr);
  choice["stop_reason"] = u.finish ? StopReason(*u.finish) : Json(nullptr);
  if (options_.return_token_ids) {
    choice["token_ids"] = u.token_ids;
    if (!chat && first) choice["prompt_token_ids"] = c.prompt_ids;
  }
  chunks.push_back(Chunk(std::move(choice)));
  return chunks;
}

int ResponseBuilder::prompt_tokens() const {
  int n = 0;
  for (int t : prompt_tokens_) n += t;
  return n;
}

int ResponseBuilder::completion_tokens() const {
  int n = 0;
  for (int p = 0; p < options_.num_prompts; ++p) {
    if (completion_tokens_[p] >= 0) {
      n += completion_tokens_[p];  // the scheduler's count, once the request ended
    } else {
      for (int i = 0; i < options_.n; ++i) n += choices_[p * options_.n + i].num_tokens;
    }
  }
  return n;
}

Json ResponseBuilder::Usage() const {
  const int prompt = prompt_tokens(), completion = completion_tokens();
  return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
}

Json ResponseBuilder::Chunk(Json choice) const {
  Json chunk = {{"id", options_.id},
                {"object", options_.kind == ApiKind::kChat ? "chat.completion.chunk" : "text_completion"},
                {"created", options_.created},
                {"model", options_.model},
                {"choices", Json::array({std::move(choice)})}};
  if (options_.include_usage) chunk["usage"] = options_.continuous_usage ? Usage() : Json(nullptr);
  return chunk;
}

Json ResponseBuilder::UsageChunk() const {
  return {{"id", options_.id},
          {"object", options_.kind == ApiKind::kChat ? "chat.completion.chunk" : "text_completion"},
          {"created", options_.created},
          {"model", options_.model},
          {"choices", Json::array()},
          {"usage", Usage()}};
}

Json ResponseBuilder::Response() const {
  const bool chat = options_.kind == ApiKind::kChat;
  Json choices = Json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    Json choice = {{"index", i}};
    bool called_tools = false;
    if (c.output != nullptr) {
      choice["message"] = c.output->Message(c.text);
      called_tools = !choice["message"]["tool_calls"].empty();
    } else if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}, {"tool_calls", Json::array()}};
    } else {
      choice["text"] = c.text;
    }
    choice["logprobs"] = options_.logprobs ? c.logprobs : Json(nullptr);
    choice["finish_reason"] = c.finish ? Json(FinishReasonWithTools(*c.finish, called_tools)) : Json(nullptr);
    choice["stop_reason"] = c.finish ? StopReason(*c.finish) : Json(nullptr);
    if (options_.return_token_ids) {
      choice["token_ids"] = c.token_ids;
      choice["prompt_token_ids"] = c.prompt_ids;
    }
    choices.push_back(std::move(choice));
  }
  return {{"id", options_.id},
          {"object", chat ? "chat.completion" : "text_completion"},
          {"created", options_.created},
          {"model", options_.model},
          {"choices", std::move(choices)},
          {"usage", Usage()}};
}

}  // namespace spar::http
