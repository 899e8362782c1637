#include "services/http/openai_request.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "services/common/status_field.h"
#include "services/http/chat_messages.h"

namespace spar::http {
namespace {

absl::Status Bad(absl::string_view field, absl::string_view message) {
  return WithField(absl::InvalidArgumentError(absl::StrCat(field, " ", message)), field);
}

// Fields accepted but without effect here, so common clients' requests pass:
// user/metadata/store/service_tier (accounting on OpenAI's side) and
// parallel_tool_calls (GLM may call several tools in one turn; spar returns
// every call it parses).
const std::set<std::string> kCommonFields = {
    "model", "stream", "stream_options", "max_tokens", "temperature", "top_p", "n", "stop", "seed",
    "presence_penalty", "frequency_penalty", "logit_bias", "user", "logprobs",
    // vLLM extensions
    "top_k", "min_p", "repetition_penalty", "ignore_eos", "stop_token_ids", "include_stop_str_in_output",
    "skip_special_tokens", "return_token_ids", "min_tokens"};
const std::set<std::string> kCompletionFields = {"prompt", "echo", "best_of", "suffix"};
const std::set<std::string> kChatFields = {
    "messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice", "parallel_tool_calls",
    "response_format", "metadata", "store", "service_tier", "chat_template_kwargs", "add_generation_prompt",
    "reasoning_effort"};

absl::StatusOr<Json> ParseBody(absl::string_view body) { return ParseJsonObjectBody(body); }

absl::Status CheckKnownFields(const Json& j, const std::set<std::string>& own) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (kCommonFields.count(it.key()) == 0 && own.count(it.key()) == 0) {
      return WithField(absl::InvalidArgumentError(absl::StrCat("Unrecognized request argument supplied: ", it.key())),
                       it.key());
    }
  }
  return absl::OkStatus();
}

// An int field that must fit `int` once in range; range rules are the
// validator's, so only absurd magnitudes are clipped here (still failing).
int ClipToInt(int64_t v) {
  if (v > INT32_MAX) return INT32_MAX;
  if (v < INT32_MIN) return INT32_MIN;
  return static_cast<int>(v);
}

// A JSON integer (signed or unsigned) as an int, clipped as above.
int IntOf(const Json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    return u > static_cast<uint64_t>(INT32_MAX) ? INT32_MAX : static_cast<int>(u);
  }
  return ClipToInt(v.get<int64_t>());
}

absl::Status ParseStop(const Json& j, GenerateParams* p) {
  const Json* stop = Find(j, "stop");
  if (stop == nullptr) return absl::OkStatus();
  if (stop->is_string()) {
    p->stop_strings.push_back(stop->get<std::string>());
    return absl::OkStatus();
  }
  if (!stop->is_array()) return WrongType("stop", "a string or an array of strings", *stop);
  for (size_t i = 0; i < stop->size(); ++i) {
    if (!(*stop)[i].is_string()) return WrongType(absl::StrCat("stop[", i, "]"), "a string", (*stop)[i]);
    p->stop_strings.push_back((*stop)[i].get<std::string>());
  }
  return absl::OkStatus();
}

absl::Status ParseStopTokenIds(const Json& j, GenerateParams* p) {
  const Json* ids = Find(j, "stop_token_ids");
  if (ids == nullptr) return absl::OkStatus();
  if (!ids->is_array()) return WrongType("stop_token_ids", "an array of integers", *ids);
  for (size_t i = 0; i < ids->size(); ++i) {
    const Json& v = (*ids)[i];
    if (!v.is_number_integer()) return WrongType(absl::StrCat("stop_token_ids[", i, "]"), "an integer", v);
    p->stop_token_ids.push_back(IntOf(v));
  }
  return absl::OkStatus();
}

// The fields both endpoints share.
absl::Status ParseCommon(const Json& j, OpenAiRequest* r) {
  GenerateParams& p = r->params;
  SPAR_ASSIGN_OR_RETURN(auto model, GetString(j, "model"));
  r->model = model.value_or("");
  SPAR_ASSIGN_OR_RETURN(auto stream, GetBool(j, "stream"));
  r->stream = stream.value_or(false);
  if (const Json* so = Find(j, "stream_options")) {
    if (!so->is_object()) return WrongType("stream_options", "an object", *so);
    if (!r->stream) return Bad("stream_options", "is only allowed when stream is true");
    for (auto it = so->begin(); it != so->end(); ++it) {
      if (it.key() != "include_usage" && it.key() != "continuous_usage_stats") {
        return Bad(absl::StrCat("stream_options.", it.key()), "is not a known option (include_usage, continuous_usage_stats)");
      }
    }
    SPAR_ASSIGN_OR_RETURN(auto usage, GetBool(*so, "include_usage"));
    SPAR_ASSIGN_OR_RETURN(auto continuous, GetBool(*so, "continuous_usage_stats"));
    r->include_usage = usage.value_or(false);
    r->continuous_usage = continuous.value_or(false);
  }
  SPAR_ASSIGN_OR_RETURN(auto temperature, GetNumber(j, "temperature"));
  if (temperature) p.sampling.temperature = static_cast<float>(*temperature);
  SPAR_ASSIGN_OR_RETURN(auto top_p, GetNumber(j, "top_p"));
  if (top_p) p.sampling.top_p = static_cast<float>(*top_p);
  SPAR_ASSIGN_OR_RETURN(auto top_k, GetInt(j, "top_k"));
  if (top_k) p.sampling.top_k = ClipToInt(*top_k);
  SPAR_ASSIGN_OR_RETURN(auto min_p, GetNumber(j, "min_p"));
  if (min_p) p.sampling.min_p = static_cast<float>(*min_p);
  SPAR_ASSIGN_OR_RETURN(auto rep, GetNumber(j, "repetition_penalty"));
  if (rep) p.sampling.repetition_penalty = static_cast<float>(*rep);
  SPAR_ASSIGN_OR_RETURN(auto freq, GetNumber(j, "frequency_penalty"));
  if (freq) p.sampling.frequency_penalty = static_cast<float>(*freq);
  SPAR_ASSIGN_OR_RETURN(auto pres, GetNumber(j, "presence_penalty"));
  if (pres) p.sampling.presence_penalty = static_cast<float>(*pres);
  SPAR_ASSIGN_OR_RETURN(auto n, GetInt(j, "n"));
  if (n) p.n = ClipToInt(*n);
  // OpenAI seeds are signed 64-bit; the sampler takes the same bits.
  SPAR_ASSIGN_OR_RETURN(auto seed, GetInt(j, "seed"));
  if (seed) p.seed = static_cast<uint64_t>(*seed);
  if (const Json* bias = Find(j, "logit_bias")) {
    if (!bias->is_object()) return WrongType("logit_bias", "an object", *bias);
    if (!bias->empty()) return Bad("logit_bias", "is not supported by this server");
  }
  SPAR_ASSIGN_OR_RETURN(auto min_tokens, GetInt(j, "min_tokens"));
  if (min_tokens && *min_tokens != 0) return Bad("min_tokens", "is not supported by this server (only 0)");
  SPAR_ASSIGN_OR_RETURN(auto user, GetString(j, "user"));
  (void)user;
  SPAR_RETURN_IF_ERROR(ParseStop(j, &p));
  SPAR_RETURN_IF_ERROR(ParseStopTokenIds(j, &p));
  SPAR_ASSIGN_OR_RETURN(auto ignore_eos, GetBool(j, "ignore_eos"));
  p.ignore_eos = ignore_eos.value_or(false);
  SPAR_ASSIGN_OR_RETURN(auto include_stop, GetBool(j, "include_stop_str_in_output"));
  p.include_stop_strings = include_stop.value_or(false);
  SPAR_ASSIGN_OR_RETURN(auto skip_special, GetBool(j, "skip_special_tokens"));
  p.skip_special_tokens = skip_special.value_or(true);
  SPAR_ASSIGN_OR_RETURN(auto token_ids, GetBool(j, "return_token_ids"));
  r->return_token_ids = token_ids.value_or(false);
  return absl::OkStatus();
}

absl::Status ParseTokenList(const Json& list, const std::string& field, std::vector<int32_t>* out) {
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& v = list[i];
    if (!v.is_number_integer()) return WrongType(absl::StrCat(field, "[", i, "]"), "an integer token id", v);
    out->push_back(IntOf(v));
  }
  return absl::OkStatus();
}

absl::Status ParsePrompts(const Json& j, int max_prompts, OpenAiRequest* r) {
  const Json* prompt = Find(j, "prompt");
  if (prompt == nullptr) return Bad("prompt", "is required");
  if (prompt->is_string()) {
    r->text_prompts.push_back(prompt->get<std::string>());
    return absl::OkStatus();
  }
  if (!prompt->is_array()) {
    return WrongType("prompt", "a string, an array of strings, an array of token ids or an array of those", *prompt);
  }
  if (prompt->empty()) return Bad("prompt", "must not be empty");
  const Json& first = (*prompt)[0];
  if (first.is_number()) {  // one prompt as token ids
    r->id_prompts.emplace_back();
    return ParseTokenList(*prompt, "prompt", &r->id_prompts.back());
  }
  if (static_cast<int>(prompt->size()) > max_prompts) {
    return Bad("prompt", absl::StrCat("may hold at most ", max_prompts, " prompts, got ", prompt->size()));
  }
  for (size_t i = 0; i < prompt->size(); ++i) {
    const Json& item = (*prompt)[i];
    const std::string field = absl::StrCat("prompt[", i, "]");
    if (first.is_string()) {
      if (!item.is_string()) return WrongType(field, "a string (like prompt[0])", item);
      r->text_prompts.push_back(item.get<std::string>());
    } else if (first.is_array()) {
      if (!item.is_array()) return WrongType(field, "an array of token ids (like prompt[0])", item);
      r->id_prompts.emplace_back();
      SPAR_RETURN_IF_ERROR(ParseTokenList(item, field, &r->id_prompts.back()));
    } else {
      return WrongType("prompt[0]", "a string, a token id or an array of token ids", first);
    }
  }
  return absl::OkStatus();
}

absl::Status ParseTools(const Json& j, OpenAiRequest* r) {
  if (const Json* tools = Find(j, "tools")) {
    if (!tools->is_array()) return WrongType("tools", "an array", *tools);
    for (size_t i = 0; i < tools->size(); ++i) {
      const Json& t = (*tools)[i];
      const std::string field = absl::StrCat("tools[", i, "]");
      if (!t.is_object()) return WrongType(field, "an object", t);
      const Json* type = Find(t, "type");
      if (type == nullptr || *type != "function") return Bad(field + ".type", "must be \"function\"");
      const Json* fn = Find(t, "function");
      if (fn == nullptr || !fn->is_object()) return Bad(field + ".function", "must be an object");
      const Json* name = Find(*fn, "name");
      if (name == nullptr || !name->is_string() || name->get_ref<const std::string&>().empty()) {
        return Bad(field + ".function.name", "must be a non-empty string");
      }
      if (const Json* params = Find(*fn, "parameters"); params != nullptr && !params->is_object()) {
        return WrongType(field + ".function.parameters", "an object (a JSON schema)", *params);
      }
    }
    if (!tools->empty()) r->template_options.tools = *tools;
  }
  SPAR_ASSIGN_OR_RETURN(auto parallel, GetBool(j, "parallel_tool_calls"));
  if (const Json* choice = Find(j, "tool_choice")) {
    ToolChoice tc;
    tc.parallel = parallel.value_or(true);
    std::string field = "tool_choice";
    if (choice->is_string()) {
      const std::string c = choice->get<std::string>();
      if (c == "none" || c == "auto") {
        r->tool_choice_none = c == "none";
        return absl::OkStatus();
      }
      if (c != "required") return Bad("tool_choice", "must be \"none\", \"auto\", \"required\" or a named function");
    } else if (choice->is_object()) {
      const Json* type = Find(*choice, "type");
      if (type == nullptr || *type != "function") return Bad("tool_choice.type", "must be \"function\"");
      const Json* fn = Find(*choice, "function");
      const Json* name = fn != nullptr && fn->is_object() ? Find(*fn, "name") : nullptr;
      if (name == nullptr || !name->is_string()) return Bad("tool_choice.function.name", "must be a string");
      tc.name = name->get<std::string>();
      field = "tool_choice.function.name";
    } else {
      return WrongType("tool_choice", "a string or an object", *choice);
    }
    SPAR_ASSIGN_OR_RETURN(
        r->constraint,
        ToolCallConstraint(tc, r->template_options.tools,
                           [](size_t i) { return absl::StrCat("tools[", i, "].function.parameters"); }, field));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<OpenAiRequest> ParseCompletionRequest(absl::string_view body, int max_prompts) {
  SPAR_ASSIGN_OR_RETURN(Json j, ParseBody(body));
  SPAR_RETURN_IF_ERROR(CheckKnownFields(j, kCompletionFields));
  OpenAiRequest r;
  r.kind = ApiKind::kCompletion;
  r.names = OpenAiFieldNames();
  r.names.top_logprobs = "logprobs";
  SPAR_RETURN_IF_ERROR(ParseCommon(j, &r));
  SPAR_RETURN_IF_ERROR(ParsePrompts(j, max_prompts, &r));
  // OpenAI's legacy default: 16 tokens.
  SPAR_ASSIGN_OR_RETURN(auto max_tokens, GetInt(j, "max_tokens"));
  r.params.max_tokens = max_tokens ? ClipToInt(*max_tokens) : 16;
  SPAR_ASSIGN_OR_RETURN(auto logprobs, GetInt(j, "logprobs"));
  if (logprobs) {
    r.logprobs = true;
    r.top_logprobs = ClipToInt(*logprobs);
  }
  SPAR_ASSIGN_OR_RETURN(auto echo, GetBool(j, "echo"));
  r.echo = echo.value_or(false);
  if (r.echo && r.logprobs) {
    return Bad("echo", "with logprobs is not supported: it needs the prompt's logprobs, which spar does not compute");
  }
  SPAR_ASSIGN_OR_RETURN(auto best_of, GetInt(j, "best_of"));
  if (best_of && *best_of != r.params.n) {
    return Bad("best_of", absl::StrCat("must equal n (", r.params.n, "): ranking more candidates than returned is not supported"));
  }
  SPAR_ASSIGN_OR_RETURN(auto suffix, GetString(j, "suffix"));
  if (suffix && !suffix->empty()) return Bad("suffix", "is not supported (no fill-in-the-middle)");
  return r;
}

absl::StatusOr<OpenAiRequest> ParseChatRequest(absl::string_view body) {
  SPAR_ASSIGN_OR_RETURN(Json j, ParseBody(body));
  SPAR_RETURN_IF_ERROR(CheckKnownFields(j, kChatFields));
  OpenAiRequest r;
  r.kind = ApiKind::kChat;
  r.names = OpenAiFieldNames();
  r.names.text = "messages";
  SPAR_RETURN_IF_ERROR(ParseCommon(j, &r));
  const Json* messages = Find(j, "messages");
  if (messages == nullptr) return Bad("messages", "is required");
  SPAR_ASSIGN_OR_RETURN(r.messages, NormalizeChatMessages(*messages));
  // max_completion_tokens replaced max_tokens; when both come, it wins (as in vLLM).
  SPAR_ASSIGN_OR_RETURN(auto max_tokens, GetInt(j, "max_tokens"));
  SPAR_ASSIGN_OR_RETURN(auto max_completion, GetInt(j, "max_completion_tokens"));
  if (max_completion) {
    r.params.max_tokens = ClipToInt(*max_completion);
    r.names.max_tokens = "max_completion_tokens";
  } else if (max_tokens) {
    r.params.max_tokens = ClipToInt(*max_tokens);
  }
  if (const Json* lp = Find(j, "logprobs")) {
    if (!lp->is_boolean()) return WrongType("logprobs", "a boolean (top_logprobs sets the alternatives)", *lp);
    r.logprobs = lp->get<bool>();
  }
  SPAR_ASSIGN_OR_RETURN(auto top, GetInt(j, "top_logprobs"));
  if (top) {
    if (!r.logprobs && *top > 0) return Bad("top_logprobs", "requires logprobs to be true");
    r.top_logprobs = ClipToInt(*top);
  }
  SPAR_RETURN_IF_ERROR(ParseTools(j, &r));
  if (const Json* format = Find(j, "response_format")) {
    SPAR_ASSIGN_OR_RETURN(auto json, ParseResponseFormat(*format));
    if (json && r.constraint) {
      return Bad("response_format", "cannot be combined with tool_choice required or a named function");
    }
    if (json) r.constraint = std::move(json);
  }
  SPAR_ASSIGN_OR_RETURN(auto effort, GetString(j, "reasoning_effort"));
  if (effort) r.template_options.kwargs["reasoning_effort"] = *effort;
  if (const Json* kwargs = Find(j, "chat_template_kwargs")) {
    if (!kwargs->is_object()) return WrongType("chat_template_kwargs", "an object", *kwargs);
    for (auto it = kwargs->begin(); it != kwargs->end(); ++it) r.template_options.kwargs[it.key()] = it.value();
  }
  SPAR_ASSIGN_OR_RETURN(auto add_gen, GetBool(j, "add_generation_prompt"));
  r.template_options.add_generation_prompt = add_gen.value_or(true);
  for (const char* key : {"metadata"}) {
    if (const Json* v = Find(j, key); v != nullptr && !v->is_object()) return WrongType(key, "an object", *v);
  }
  SPAR_ASSIGN_OR_RETURN(auto store, GetBool(j, "store"));
  SPAR_ASSIGN_OR_RETURN(auto tier, GetString(j, "service_tier"));
  (void)store;
  (void)tier;
  return r;
}

absl::StatusOr<std::vector<GenerateParams>> BuildGenerateParams(const OpenAiRequest& r,
                                                                const ChatTemplate* chat_template,
                                                                const ApiLimits& limits) {
  GenerateParams base = r.params;
  base.output_logprobs = r.logprobs;
  base.top_logprobs = r.top_logprobs;
  base.echo_prompt_ids = r.return_token_ids;
  std::vector<GenerateParams> out;
  auto add = [&](GenerateParams p, GenerateFieldNames names) -> absl::Status {
    SPAR_RETURN_IF_ERROR(ValidateGenerateParams(&p, limits, names));
    out.push_back(std::move(p));
    return absl::OkStatus();
  };
  if (r.kind == ApiKind::kChat) {
    SPAR_ASSIGN_OR_RETURN(std::string prompt, RenderChatPrompt(chat_template, r.messages, r.template_options,
                                                               "messages", "use /v1/completions"));
    GenerateParams p = base;
    p.text = std::move(prompt);
    SPAR_RETURN_IF_ERROR(add(std::move(p), r.names));
    return out;
  }
  const size_t count = r.text_prompts.size() + r.id_prompts.size();
  for (size_t i = 0; i < count; ++i) {
    GenerateFieldNames names = r.names;
    if (count > 1) names.text = names.token_ids = absl::StrCat("prompt[", i, "]");
    GenerateParams p = base;
    if (i < r.text_prompts.size()) {
      p.text = r.text_prompts[i];
    } else {
      p.prompt_ids = r.id_prompts[i - r.text_prompts.size()];
    }
    SPAR_RETURN_IF_ERROR(add(std::move(p), names));
  }
  return out;
}

GenerateFieldNames OpenAiFieldNames() {
  GenerateFieldNames n;
  n.request_id = "X-Request-Id";
  n.text = "prompt";
  n.token_ids = "prompt";
  n.temperature = "temperature";
  n.top_p = "top_p";
  n.top_k = "top_k";
  n.min_p = "min_p";
  n.repetition_penalty = "repetition_penalty";
  n.frequency_penalty = "frequency_penalty";
  n.presence_penalty = "presence_penalty";
  n.n = "n";
  n.max_tokens = "max_tokens";
  n.stop_token_ids = "stop_token_ids";
  n.stop_strings = "stop";
  n.top_logprobs = "top_logprobs";
  return n;
}

}  // namespace spar::http
