// Fuzzes the Jinja parser and interpreter (text/jinja_*) with template
// sources: a chat template ships inside the model's tokenizer_config.json,
// so it is input, and a hostile one must fail with a status (syntax error,
// raise_exception, or a RenderLimits bound), never crash, recurse without
// bound or run away. The context is a fixed conversation with tools.
//
// Limits are far below the defaults so a runaway loop ends in microseconds
// and libFuzzer's per-input timeout only fires for a real hang.
#include <cstdint>
#include <string>

#include "fuzz/fuzz_check.h"
#include "nlohmann/json.hpp"
#include "text/chat_template.h"

namespace {

const nlohmann::ordered_json& Context() {
  static const auto* context = new nlohmann::ordered_json(nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": "What is 2+2? <|user|> ünïcödé 你好"},
      {"role": "assistant", "content": "4", "reasoning_content": "add",
       "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
      {"role": "tool", "content": "{\"sum\": 4}"},
      {"role": "user", "content": [{"type": "text", "text": "thanks"}]}
    ],
    "tools": [{"type": "function", "function": {"name": "add", "description": "adds",
               "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}],
    "add_generation_prompt": true,
    "bos_token": "<s>", "eos_token": "</s>",
    "enable_thinking": false, "n": 3, "x": 1.5, "none": null
  })"));
  return *context;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  spar::ChatTemplateLimits limits;
  limits.max_output_bytes = 1 << 16;
  limits.max_string_bytes = 1 << 20;
  limits.max_steps = 20000;
  limits.max_call_depth = 16;
  auto tmpl = spar::ChatTemplate::Parse(absl::string_view(reinterpret_cast<const char*>(data), size), limits);
  if (!tmpl.ok()) {
    SPAR_FUZZ_CHECK(!tmpl.status().message().empty());
    return 0;
  }
  auto out = (*tmpl)->Render(Context());
  if (out.ok()) SPAR_FUZZ_CHECK(out->size() <= limits.max_output_bytes);
  return 0;
}
