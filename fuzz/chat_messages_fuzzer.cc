// Fuzzes chat-template rendering with hostile *messages*: the OpenAI
// chat endpoint renders whatever JSON a client posts through the model's
// real template. Byte 0 picks the template (tests/text/data/templates); the
// rest is a JSON document: an array of messages, or an object with
// "messages", optional "tools" and "kwargs" (chat_template_kwargs).
//
// Properties: rendering ends in a string or a status (an unexpected shape,
// raise_exception, a RenderLimits bound), never a crash; output stays
// within the limit.
#include <cstdint>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "nlohmann/json.hpp"
#include "text/chat_template.h"

namespace {

using json = nlohmann::ordered_json;

spar::ChatTemplateLimits Limits() {
  spar::ChatTemplateLimits limits;
  limits.max_output_bytes = 1 << 18;
  limits.max_string_bytes = 4 << 20;
  limits.max_steps = 200000;
  return limits;
}

const std::vector<std::unique_ptr<spar::ChatTemplate>>& Templates() {
  static const auto* templates = [] {
    auto* list = new std::vector<std::unique_ptr<spar::ChatTemplate>>();
    for (const char* name : {"glm5", "glm5x_patched", "glm45", "deepseek_v32", "deepseek_v31", "deepseek_v3",
                             "qwen3", "tiny"}) {
      const std::string path = std::string(SPAR_SOURCE_DIR) + "/tests/text/data/templates/" + name + ".jinja";
      auto t = spar::ChatTemplate::FromFile(path, Limits());
      if (!t.ok()) {
        std::fprintf(stderr, "cannot load %s: %s\n", path.c_str(), std::string(t.status().message()).c_str());
        std::abort();
      }
      list->push_back(std::move(*t));
    }
    return list;
  }();
  return *templates;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto& templates = Templates();
  const spar::ChatTemplate& tmpl = *templates[data[0] % templates.size()];
  json doc = json::parse(data + 1, data + size, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return 0;
  // Moved, never copied: copying nlohmann JSON recurses, and a hostile
  // document may be deeper than the stack (ChatTemplate refuses those).
  json messages;
  spar::ChatTemplateOptions options;
  if (!doc.is_object()) {
    messages = std::move(doc);
  } else {
    messages = doc.contains("messages") ? std::move(doc["messages"]) : json::array();
    if (doc.contains("tools")) options.tools = std::move(doc["tools"]);
    if (doc.contains("kwargs") && doc["kwargs"].is_object()) options.kwargs = std::move(doc["kwargs"]);
    if (doc.contains("add_generation_prompt") && doc["add_generation_prompt"].is_boolean()) {
      options.add_generation_prompt = doc["add_generation_prompt"].get<bool>();
    }
  }
  auto out = tmpl.Apply(messages, options);
  if (out.ok()) SPAR_FUZZ_CHECK(out->size() <= Limits().max_output_bytes);
  return 0;
}
