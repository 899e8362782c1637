// What a request constrains its output to, as one JSON document that
// travels in the plan's sampling instructions (worker.proto
// SamplingState.constraint) and is compiled where sampling happens:
//
//   {"type": "json_object"}                           any JSON object
//   {"type": "json_schema", "schema": {...}}          a value of the schema (json_schema.h)
//   {"type": "tool_calls", "syntax": "glm" | "dsml",  calls in the model's syntax
//    "tools": [{"name", "parameters"}, ...],          (tool_call_grammar.h): of any
//    "parallel": true}                                of the tools, one or several
//   + "reasoning": true                               free reasoning first, up to </think>
//                                                     (the prompt opened <think>)
//   + "paths": {...}                                  how errors name the request's fields
//
// The same spec always compiles to the same grammar; its canonical text
// (Key) identifies it in caches.
#ifndef SPAR_GRAMMAR_CONSTRAINT_H_
#define SPAR_GRAMMAR_CONSTRAINT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grammar/compiled_grammar.h"
#include "grammar/token_vocab.h"
#include "grammar/tool_call_grammar.h"
#include "nlohmann/json.hpp"

namespace spar::grammar {

struct ConstraintSpec {
  enum class Kind { kJsonObject, kJsonSchema, kToolCalls };
  Kind kind = Kind::kJsonObject;
  nlohmann::ordered_json schema;  // kJsonSchema
  std::string schema_path = "response_format.json_schema.schema";
  ToolSyntax syntax = ToolSyntax::kGlm;  // kToolCalls; also which tags reasoning must avoid
  std::vector<ToolSpec> tools;           // kToolCalls
  bool parallel = true;
  bool reasoning = false;

  static absl::StatusOr<ConstraintSpec> Parse(absl::string_view json);
  static absl::StatusOr<ConstraintSpec> FromJson(const nlohmann::ordered_json& j);
  nlohmann::ordered_json ToJson() const;
  std::string Key() const { return ToJson().dump(); }
};

struct CompiledConstraint {
  std::shared_ptr<const CompiledGrammar> grammar;
  // Texts of special tokens the output may contain (</think>, the tags).
  std::vector<std::string> special_tags;
};

// INVALID_ARGUMENT naming the field (schema path) when the spec cannot be
// compiled: an unsupported or unsatisfiable schema, a tool name the syntax
// cannot write. With `vocab`, the grammar's completion costs count the
// tokens that spell its literals (tags, keys) rather than their bytes, so
// token budgets are tight where it matters (token_mask.h).
absl::StatusOr<CompiledConstraint> CompileConstraint(const ConstraintSpec& spec, const TokenVocab* vocab = nullptr);

// Special tokens of `vocab` whose text is (a piece of) one of `tags`.
std::vector<int32_t> SpecialTokensOf(const TokenVocab& vocab, const std::vector<std::string>& tags);

}  // namespace spar::grammar

#endif  // SPAR_GRAMMAR_CONSTRAINT_H_
