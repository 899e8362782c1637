#include "text/dsv32_encoding.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "text/jinja_value.h"

namespace spar {
namespace {

using Json = nlohmann::ordered_json;

#define SPAR_DSML_TOKEN "\xef\xbd\x9c" "DSML" "\xef\xbd\x9c"  // ｜DSML｜

constexpr const char* kBos = "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";  // <｜begin▁of▁sentence｜>
constexpr const char* kEos = "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";      // <｜end▁of▁sentence｜>
constexpr const char* kUser = "<\xef\xbd\x9cUser\xef\xbd\x9c>";            // <｜User｜>
constexpr const char* kAssistant = "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>";  // <｜Assistant｜>
constexpr const char* kThinkStart = "<think>";
constexpr const char* kThinkEnd = "</think>";

// The format's tools section (TOOLS_SYSTEM_TEMPLATE), with the schemas
// between its two halves.
constexpr const char* kToolsHead =
    "## Tools\n"
    "\n"
    "You have access to a set of tools you can use to answer the user's question.\n"
    "You can invoke functions by writing a \"<" SPAR_DSML_TOKEN "function_calls>\" block like the following as part "
    "of your reply to the user:\n"
    "<" SPAR_DSML_TOKEN "function_calls>\n"
    "<" SPAR_DSML_TOKEN "invoke name=\"$FUNCTION_NAME\">\n"
    "<" SPAR_DSML_TOKEN "parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" SPAR_DSML_TOKEN
    "parameter>\n"
    "...\n"
    "</" SPAR_DSML_TOKEN "invoke>\n"
    "<" SPAR_DSML_TOKEN "invoke name=\"$FUNCTION_NAME2\">\n"
    "...\n"
    "</" SPAR_DSML_TOKEN "invoke>\n"
    "</" SPAR_DSML_TOKEN "function_calls>\n"
    "\n"
    "String and scalar parameters should be specified as is without any escaping or quotes, while lists and objects "
    "should use JSON format. The \"string\" attribute should be set to \"true\" for string type parameters and "
    "\"false\" for other types (numbers, booleans, arrays, objects).\n"
    "\n"
    "If the thinking_mode is enabled, then after function results you should strongly consider outputting a thinking "
    "block. Here is an example:\n"
    "\n"
    "<" SPAR_DSML_TOKEN "function_calls>\n"
    "...\n"
    "</" SPAR_DSML_TOKEN "function_calls>\n"
    "\n"
    "<function_results>\n"
    "...\n"
    "</function_results>\n"
    "\n"
    "<think>...thinking about results</think>\n"
    "\n"
    "Here are the functions available in JSONSchema format:\n"
    "<functions>\n";
constexpr const char* kToolsTail = "\n</functions>\n";

absl::Status Bad(size_t index, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("messages[", index, "]: ", why));
}

// Python's json.dumps(value, ensure_ascii=False).
absl::StatusOr<std::string> ToJson(const Json& value) {
  jinja::JsonDumpOptions opt;  // Python's defaults: ", " and ": "
  opt.ensure_ascii = false;
  return jinja::DumpJson(jinja::Value::FromJson(value), opt);
}

std::string TextOf(const Json& content) { return content.is_string() ? content.get<std::string>() : ""; }

absl::StatusOr<std::string> ToolsBlock(const Json& tools) {
  std::vector<std::string> schemas;
  for (const Json& t : tools) {
    const Json& fn = t.is_object() && t.contains("function") ? t["function"] : t;
    SPAR_ASSIGN_OR_RETURN(std::string s, ToJson(fn));
    schemas.push_back(std::move(s));
  }
  return absl::StrCat(kToolsHead, absl::StrJoin(schemas, "\n"), kToolsTail);
}

// One assistant call as a DSML invoke.
absl::StatusOr<std::string> Invoke(const Json& call, size_t index) {
  const Json& fn = call.contains("function") ? call["function"] : call;
  Json args = fn.contains("arguments") ? fn["arguments"] : Json::object();
  if (args.is_string()) {
    args = Json::parse(args.get<std::string>(), nullptr, /*allow_exceptions=*/false);
  }
  if (!args.is_object()) return Bad(index, "an assistant tool call's function.arguments must be a JSON object");
  std::vector<std::string> params;
  for (auto it = args.begin(); it != args.end(); ++it) {
    const bool is_str = it.value().is_string();
    std::string value;
    if (is_str) {
      value = it.value().get<std::string>();
    } else {
      SPAR_ASSIGN_OR_RETURN(value, ToJson(it.value()));
    }
    params.push_back(absl::StrCat("<" SPAR_DSML_TOKEN "parameter name=\"", it.key(), "\" string=\"",
                                  is_str ? "true" : "false", "\">", value, "</" SPAR_DSML_TOKEN "parameter>"));
  }
  return absl::StrCat("<" SPAR_DSML_TOKEN "invoke name=\"", fn.value("name", ""), "\">\n", absl::StrJoin(params, "\n"),
                      "\n</" SPAR_DSML_TOKEN "invoke>");
}

int LastUserIndex(const Json& messages) {
  for (int i = static_cast<int>(messages.size()) - 1; i >= 0; --i) {
    const std::string role = messages[i].value("role", "");
    if (role == "user" || role == "developer") return i;
  }
  return -1;
}

absl::StatusOr<std::string> RenderMessage(size_t index, const Json& messages, bool thinking, int last_user) {
  const Json& msg = messages[index];
  const std::string role = msg.value("role", "");
  const Json content = msg.contains("content") ? msg["content"] : Json(nullptr);
  const Json tools = msg.value("tools", Json::array());
  std::string prompt;
  const int i = static_cast<int>(index);
  if (role == "system") {
    prompt += TextOf(content);
    if (tools.is_array() && !tools.empty()) {
      SPAR_ASSIGN_OR_RETURN(std::string block, ToolsBlock(tools));
      absl::StrAppend(&prompt, "\n\n", block);
    }
  } else if (role == "developer" || role == "user") {
    std::string text = TextOf(content);
    if (role == "developer") {
      if (text.empty()) return Bad(index, "a developer message needs content");
      std::string dev;
      if (tools.is_array() && !tools.empty()) {
        SPAR_ASSIGN_OR_RETURN(std::string block, ToolsBlock(tools));
        absl::StrAppend(&dev, "\n\n", block);
      }
      absl::StrAppend(&dev, "\n\n# The user's message is: ", text);
      text = std::move(dev);
    }
    absl::StrAppend(&prompt, kUser, text, kAssistant, i == last_user && thinking ? kThinkStart : kThinkEnd);
  } else if (role == "tool") {
    int prev = i - 1;
    while (prev >= 0 && messages[prev].value("role", "") == "tool") --prev;
    if (!(i == 0 || (prev >= 0 && messages[prev].value("role", "") == "assistant"))) {
      return Bad(index, "a tool message must follow an assistant message with tool calls");
    }
    const Json calls = prev >= 0 ? messages[prev].value("tool_calls", Json::array()) : Json::array();
    const size_t order = static_cast<size_t>(i - prev);
    if (!calls.is_array() || calls.size() < order) return Bad(index, "a tool result without a tool call to answer");
    if (order == 1) prompt += "\n\n<function_results>";
    absl::StrAppend(&prompt, "\n<result>", TextOf(content), "</result>");
    if (order == calls.size()) {
      absl::StrAppend(&prompt, "\n</function_results>", "\n\n", i >= last_user && thinking ? kThinkStart : kThinkEnd);
    }
  } else if (role == "assistant") {
    std::string calls_text;
    const Json calls = msg.value("tool_calls", Json::array());
    if (calls.is_array() && !calls.empty()) {
      std::vector<std::string> invokes;
      for (const Json& c : calls) {
        SPAR_ASSIGN_OR_RETURN(std::string inv, Invoke(c, index));
        invokes.push_back(std::move(inv));
      }
      calls_text = absl::StrCat("\n\n<" SPAR_DSML_TOKEN "function_calls>\n", absl::StrJoin(invokes, "\n"),
                                "\n</" SPAR_DSML_TOKEN "function_calls>");
    }
    std::string thinking_part;
    if (thinking && i > last_user) {
      const std::string reasoning = TextOf(msg.value("reasoning_content", Json(nullptr)));
      if (reasoning.empty() && calls_text.empty()) {
        return Bad(index, "in thinking mode an assistant message after the last user message needs "
                          "reasoning_content or tool_calls");
      }
      thinking_part = absl::StrCat(reasoning, kThinkEnd);
    }
    absl::StrAppend(&prompt, thinking_part, TextOf(content), calls_text, kEos);
  } else {
    return Bad(index, absl::StrCat("role \"", role, "\" is not one of system, developer, user, assistant, tool"));
  }
  return prompt;
}

}  // namespace

absl::StatusOr<std::string> EncodeDsv32Messages(const Json& messages_in, const Dsv32Options& options) {
  if (!messages_in.is_array()) return absl::InvalidArgumentError("messages must be a JSON array");
  Json messages = messages_in;
  if (options.tools.is_array() && !options.tools.empty()) {
    if (messages.empty() || messages[0].value("role", "") != "system") {
      messages.insert(messages.begin(), Json{{"role", "system"}, {"content", ""}});
    }
    messages[0]["tools"] = options.tools;
  }
  const int last_user = LastUserIndex(messages);
  if (options.thinking) {
    // drop_thinking: earlier turns lose their reasoning; the Python also
    // drops developer messages before the last user turn and then fails
    // on the shorter list, so they are an error here too.
    for (int i = 0; i < last_user; ++i) {
      const std::string role = messages[i].value("role", "");
      if (role == "assistant") messages[i].erase("reasoning_content");
      if (role == "developer") {
        return Bad(i, "a developer message before the last user turn cannot be encoded in thinking mode");
      }
    }
  }
  std::string prompt = options.add_bos ? kBos : "";
  for (size_t i = 0; i < messages.size(); ++i) {
    SPAR_ASSIGN_OR_RETURN(std::string part, RenderMessage(i, messages, options.thinking, last_user));
    prompt += part;
  }
  return prompt;
}

Dsv32Options Dsv32OptionsFor(const ChatTemplateOptions& options) {
  Dsv32Options o;
  o.tools = options.tools;
  if (options.kwargs.is_object()) {
    for (const char* key : {"thinking", "enable_thinking"}) {
      if (options.kwargs.contains(key) && options.kwargs[key].is_boolean()) o.thinking = options.kwargs[key].get<bool>();
    }
  }
  return o;
}

std::unique_ptr<ChatTemplate> Dsv32ChatTemplate() {
  return ChatTemplate::FromEncoder("DeepSeek-V3.2 encoding (encoding_dsv32.py rules)",
                                   [](const Json& messages, const ChatTemplateOptions& options) {
                                     return EncodeDsv32Messages(messages, Dsv32OptionsFor(options));
                                   });
}

}  // namespace spar
