// The last stage's constraint states: a sequence recomputed after a
// preemption (its state re-created, its tokens observed again in other
// chunks) has exactly the masks it had; tokens the grammar refuses and
// specs that do not compile are errors naming the sequence; unconstrained
// sequences get no mask.
#include "services/worker/constraint_states.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "text/tokenizer.h"

namespace spar {
namespace {

const std::string kModel = std::string(SPAR_SOURCE_DIR) + "/models/tiny-glm5-chat/bf16";
constexpr int32_t kVocab = 1085;

SequenceSampling Constrained(int32_t prompt_len) {
  SequenceSampling s;
  s.prompt_len = prompt_len;
  SamplingConstraint c;
  c.spec = R"({"type": "json_schema", "schema": {"type": "object", "properties": {"a": {"type": "integer"}},
               "required": ["a"]}})";
  c.end_token_ids = {0};
  c.max_tokens = 30;
  s.constraint = c;
  return s;
}

std::vector<uint32_t> MaskOf(ConstraintStates& states, int64_t seq, uint64_t step) {
  const uint32_t* m = states.Mask(seq, step);
  EXPECT_NE(m, nullptr);
  return m == nullptr ? std::vector<uint32_t>() : std::vector<uint32_t>(m, m + (kVocab + 31) / 32);
}

TEST(ConstraintStatesTest, RecomputedSequencesHaveTheSameMasks) {
  auto tok = Tokenizer::FromFile(kModel + "/tokenizer.json");
  ASSERT_TRUE(tok.ok());
  const std::vector<int32_t> prompt = {7, 40, 41, 8};
  const std::vector<int32_t> output = *(*tok)->Encode("{\"a\": 1", /*allow_special=*/false);
  ConstraintStates a(kModel, kVocab), b(kModel, kVocab);
  ASSERT_TRUE(a.Reset(1, Constrained(4)).ok());
  ASSERT_TRUE(a.Observe(1, 0, prompt).ok());
  std::vector<std::vector<uint32_t>> masks;
  for (size_t i = 0; i < output.size(); ++i) {
    masks.push_back(MaskOf(a, 1, i));
    ASSERT_TRUE((masks.back()[output[i] >> 5] >> (output[i] & 31)) & 1u) << "token " << i << " is masked";
    ASSERT_TRUE(a.Observe(1, static_cast<int32_t>(prompt.size() + i), {output[i]}).ok());
  }
  // The same sequence, recomputed: prompt and outputs in one chunk.
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), output.begin(), output.end());
  ASSERT_TRUE(b.Reset(1, Constrained(4)).ok());
  ASSERT_TRUE(b.Observe(1, 0, all).ok());
  EXPECT_EQ(MaskOf(b, 1, output.size()), MaskOf(a, 1, output.size()));
  // "}" completes the object: nothing may follow.
  const int32_t close = (*tok)->Encode("}", false)->at(0);
  EXPECT_TRUE(a.Finishes(1, close, output.size()));
  EXPECT_FALSE(a.Finishes(1, output.back(), output.size()));
}

TEST(ConstraintStatesTest, ErrorsAndUnconstrainedSequences) {
  ConstraintStates s(kModel, kVocab);
  SequenceSampling plain;
  plain.prompt_len = 2;
  ASSERT_TRUE(s.Reset(5, plain).ok());
  EXPECT_EQ(s.Mask(5, 0), nullptr);
  EXPECT_TRUE(s.Observe(5, 0, {1, 2, 3}).ok());
  SequenceSampling bad = Constrained(2);
  bad.constraint->spec = R"({"type": "json_schema", "schema": {"type": "string", "pattern": "x"}})";
  absl::Status st = s.Reset(6, bad);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("sequence 6"), std::string::npos) << st;
  ASSERT_TRUE(s.Reset(7, Constrained(2)).ok());
  ASSERT_TRUE(s.Observe(7, 0, {7, 8}).ok());
  st = s.Observe(7, 2, {40});  // a digit cannot start the object
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  s.Release(7);
  EXPECT_EQ(s.Mask(7, 0), nullptr);
  EXPECT_EQ(s.size(), 0u);
}

TEST(ConstraintStatesTest, AModelWithoutATokenizerIsAClearError) {
  ConstraintStates s("/nonexistent", kVocab);
  absl::Status st = s.Reset(1, Constrained(1));
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("tokenizer"), std::string::npos) << st;
}

}  // namespace
}  // namespace spar
