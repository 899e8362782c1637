// Template options through the OpenAI request layer render what
// @huggingface/jinja renders: each `template_options_*` case of
// tests/npm/chat_cases.js is a chat request (chat_template_kwargs,
// top-level reasoning_effort, tools) whose reference render is the context
// vLLM would build from it (reasoning_effort, then the kwargs over it).
// The request goes through ParseChatRequest and RenderChatPrompt as a
// served request does; the prompt must equal the reference byte for byte.
// Needs the text tests' reference file (ctest fixture text_reference).
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "services/http/chat_messages.h"
#include "services/http/openai_request.h"

namespace spar::http {
namespace {

TEST(TemplateKwargsParityTest, RequestsRenderAsHuggingFaceJinja) {
  const char* path = std::getenv("SPAR_TEXT_REFERENCE");
  ASSERT_NE(path, nullptr) << "SPAR_TEXT_REFERENCE is not set; run through ctest (fixture text_reference)";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot read " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  const Json ref = Json::parse(ss.str(), nullptr, false);
  ASSERT_FALSE(ref.is_discarded());
  const Json& chat = ref["chat"];
  std::map<std::string, std::unique_ptr<ChatTemplate>> templates;
  int checked = 0;
  for (const Json& c : chat["cases"]) {
    if (!c.contains("request")) continue;
    const std::string name = c["template"].get<std::string>();
    if (!templates.count(name)) {
      auto t = ChatTemplate::FromFile(absl::StrCat(chat["template_dir"].get<std::string>(), "/", name, ".jinja"));
      ASSERT_TRUE(t.ok()) << t.status();
      templates[name] = std::move(*t);
    }
    ASSERT_FALSE(c.contains("error")) << c["name"];
    auto request = ParseChatRequest(c["request"].dump());
    ASSERT_TRUE(request.ok()) << c["name"] << ": " << request.status();
    auto prompt = RenderChatPrompt(templates[name].get(), request->messages, request->template_options, "messages", "");
    ASSERT_TRUE(prompt.ok()) << c["name"] << ": " << prompt.status();
    EXPECT_EQ(*prompt, c["rendered"].get<std::string>()) << name << " " << c["name"];
    ++checked;
  }
  EXPECT_GE(checked, 30);
  std::printf("[template options] %d requests render equal to @huggingface/jinja\n", checked);
}

}  // namespace
}  // namespace spar::http
