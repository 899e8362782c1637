// The tiny GLM-5 chat model's prompts, as spar renders and encodes them, are
// the prompts it was trained on: for every held-out arithmetic case of
// tests/data/tiny_chat/evals.json the training script stored the text its
// renderer produced (tools/train_tiny/data.py, checked there against
// GLM-5's Jinja template); spar's ChatTemplate, reading the shipped
// tokenizer_config.json, must produce the same bytes, and the shipped
// tokenizer.json must give every digit and recall word a single token.
#include <string>

#include "base/mapped_file.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/test_util.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace spar {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

class TinyChatTemplateTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string dir = testing::SourcePath("models/tiny-glm5-chat/" + GetParam());
    auto config = ReadFileToString(dir + "/tokenizer_config.json");
    ASSERT_TRUE(config.ok()) << config.status();
    auto tmpl = ChatTemplate::FromTokenizerConfig(*config);
    ASSERT_TRUE(tmpl.ok()) << tmpl.status();
    template_ = std::move(*tmpl);
    auto tok = Tokenizer::FromFile(dir + "/tokenizer.json");
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::move(*tok);
    evals_ = json::parse(testing::ReadSource("tests/data/tiny_chat/evals.json"));
  }

  std::unique_ptr<ChatTemplate> template_;
  std::unique_ptr<Tokenizer> tokenizer_;
  json evals_;
};

TEST_P(TinyChatTemplateTest, RendersLikeTheTrainingData) {
  int checked = 0, thinking_off = 0;
  for (const auto& c : evals_["arithmetic"]) {
    ChatTemplateOptions o;
    if (!c["enable_thinking"].get<bool>()) {
      o.kwargs = {{"enable_thinking", false}};
      ++thinking_off;
    }
    ordered_json messages = ordered_json::array({{{"role", "user"}, {"content", c["question"].get<std::string>()}}});
    auto text = template_->Apply(messages, o);
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(*text, c["prompt"].get<std::string>());
    ++checked;
  }
  EXPECT_EQ(checked, 200);
  EXPECT_GT(thinking_off, 20);
}

TEST_P(TinyChatTemplateTest, DigitsAndRecallWordsAreSingleTokens) {
  for (char d = '0'; d <= '9'; ++d) {
    auto ids = tokenizer_->Encode(std::string(1, d));
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(ids->size(), 1u) << d;
  }
  auto number = tokenizer_->Encode("123");
  ASSERT_TRUE(number.ok());
  EXPECT_EQ(number->size(), 3u);  // digit by digit
  int words = 0;
  for (const auto& c : evals_["recall"]) {
    for (const std::string& w : {c["key"].get<std::string>(), c["value"].get<std::string>()}) {
      auto ids = tokenizer_->Encode(" " + w);
      ASSERT_TRUE(ids.ok());
      EXPECT_EQ(ids->size(), 1u) << w;
      ++words;
    }
  }
  EXPECT_GT(words, 100);
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, TinyChatTemplateTest, ::testing::Values("bf16", "fp8"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace spar
