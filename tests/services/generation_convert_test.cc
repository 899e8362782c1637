// Every field of a GenerateRequest is validated with an INVALID_ARGUMENT
// that names it.
#include "services/scheduler/generation_convert.h"

#include <cmath>
#include <functional>

#include "gtest/gtest.h"

namespace spar {
namespace {

ApiLimits Limits() {
  ApiLimits l;
  l.vocab_size = 320;
  l.max_model_len = 4096;
  l.served_model_name = "tiny";
  return l;
}

v1::GenerateRequest Good() {
  v1::GenerateRequest r;
  r.set_text("hello");
  return r;
}

TEST(GenerationConvertTest, DefaultsAreTheSemanticDefaults) {
  auto p = ParseGenerateRequest(Good(), Limits());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->sampling.temperature, 1.0f);
  EXPECT_EQ(p->sampling.top_p, 1.0f);
  EXPECT_EQ(p->n, 1);
  EXPECT_FALSE(p->max_tokens.has_value());
  EXPECT_FALSE(p->seed.has_value());
  EXPECT_TRUE(p->output_text);
  EXPECT_TRUE(p->skip_special_tokens);
}

TEST(GenerationConvertTest, FullRequest) {
  v1::GenerateRequest r;
  r.set_request_id("abc");
  r.set_model("tiny");
  r.mutable_token_ids()->add_ids(5);
  r.mutable_token_ids()->add_ids(6);
  auto* s = r.mutable_sampling();
  s->set_temperature(0);
  s->set_top_k(-1);
  s->set_seed(42);
  s->set_n(3);
  r.mutable_stopping()->set_max_tokens(9);
  r.mutable_stopping()->add_stop_token_ids(7);
  r.mutable_stopping()->add_stop_strings("\n");
  r.mutable_response()->set_top_logprobs(4);
  auto p = ParseGenerateRequest(r, Limits());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->prompt_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(p->sampling.temperature, 0.0f);
  EXPECT_EQ(p->sampling.top_k, 0);
  EXPECT_EQ(*p->seed, 42u);
  EXPECT_EQ(p->n, 3);
  EXPECT_EQ(*p->max_tokens, 9);
  EXPECT_EQ(p->top_logprobs, 4);
}

TEST(GenerationConvertTest, EveryBadFieldIsNamed) {
  struct Case {
    std::string field;
    std::function<void(v1::GenerateRequest*)> mutate;
  };
  const std::vector<Case> cases = {
      {"prompt", [](auto* r) { r->clear_text(); }},
      {"text", [](auto* r) { r->set_text(""); }},
      {"text", [](auto* r) { r->set_text("bad \xff utf8"); }},
      {"token_ids.ids", [](auto* r) { r->mutable_token_ids(); }},
      {"token_ids.ids[1]", [](auto* r) { r->mutable_token_ids()->add_ids(1); r->mutable_token_ids()->add_ids(320); }},
      {"token_ids.ids[0]", [](auto* r) { r->mutable_token_ids()->add_ids(-1); }},
      {"model", [](auto* r) { r->set_model("gpt-5"); }},
      {"request_id", [](auto* r) { r->set_request_id(std::string(300, 'x')); }},
      {"sampling.temperature", [](auto* r) { r->mutable_sampling()->set_temperature(-1); }},
      {"sampling.temperature", [](auto* r) { r->mutable_sampling()->set_temperature(std::nanf("")); }},
      {"sampling.top_p", [](auto* r) { r->mutable_sampling()->set_top_p(0); }},
      {"sampling.top_p", [](auto* r) { r->mutable_sampling()->set_top_p(1.5); }},
      {"sampling.top_k", [](auto* r) { r->mutable_sampling()->set_top_k(-2); }},
      {"sampling.min_p", [](auto* r) { r->mutable_sampling()->set_min_p(2); }},
      {"sampling.repetition_penalty", [](auto* r) { r->mutable_sampling()->set_repetition_penalty(0); }},
      {"sampling.frequency_penalty", [](auto* r) { r->mutable_sampling()->set_frequency_penalty(3); }},
      {"sampling.presence_penalty", [](auto* r) { r->mutable_sampling()->set_presence_penalty(-3); }},
      {"sampling.n", [](auto* r) { r->mutable_sampling()->set_n(0); }},
      {"sampling.n", [](auto* r) { r->mutable_sampling()->set_n(17); }},
      {"stopping.max_tokens", [](auto* r) { r->mutable_stopping()->set_max_tokens(0); }},
      {"stopping.max_tokens", [](auto* r) { r->mutable_stopping()->set_max_tokens(5000); }},
      {"stopping.stop_token_ids[0]", [](auto* r) { r->mutable_stopping()->add_stop_token_ids(999); }},
      {"stopping.stop_strings[0]", [](auto* r) { r->mutable_stopping()->add_stop_strings(""); }},
      {"stopping.stop_strings", [](auto* r) { for (int i = 0; i < 17; ++i) r->mutable_stopping()->add_stop_strings("x"); }},
      {"response.top_logprobs", [](auto* r) { r->mutable_response()->set_top_logprobs(21); }},
  };
  for (const Case& c : cases) {
    v1::GenerateRequest r = Good();
    c.mutate(&r);
    auto p = ParseGenerateRequest(r, Limits());
    ASSERT_FALSE(p.ok()) << c.field;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(std::string(p.status().message()).find(c.field), std::string::npos)
        << "expected \"" << c.field << "\" in: " << p.status().message();
  }
}

TEST(GenerationConvertTest, UpdateToProto) {
  GenerationUpdate u;
  u.request_id = "r";
  u.prompt = PromptInfo{3, {1, 2, 3}};
  u.output.index = 1;
  u.output.text = "hi";
  u.output.token_ids = {9};
  u.output.logprobs = {-0.25f};
  u.output.top = {{{9, -0.25f}, {8, -2.0f}}};
  FinishInfo f;
  f.reason = SeqFinishReason::kStop;
  f.num_output_tokens = 4;
  f.eos_token_id = 288;
  u.output.finish = f;
  u.usage = UsageInfo{3, 4};
  v1::GenerateResponse p;
  UpdateToProto(u, &p);
  EXPECT_EQ(p.prompt_info().prompt_token_ids_size(), 3);
  EXPECT_EQ(p.output().top_logprobs(0).token_ids(1), 8);
  EXPECT_EQ(p.output().finish().reason(), v1::FINISH_REASON_STOP);
  EXPECT_EQ(p.output().finish().eos_token_id(), 288);
  EXPECT_EQ(p.usage().total_tokens(), 7u);
}

}  // namespace
}  // namespace spar
