#include "grammar/constraint.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "grammar/byte_dfa.h"
#include "grammar/json_rules.h"
#include "grammar/json_schema.h"

namespace spar::grammar {
namespace {

using Json = nlohmann::ordered_json;

const char* SyntaxName(ToolSyntax s) { return s == ToolSyntax::kGlm ? "glm" : "dsml"; }

}  // namespace

absl::StatusOr<ConstraintSpec> ConstraintSpec::Parse(absl::string_view text) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("constraint: not valid JSON");
  return FromJson(j);
}

absl::StatusOr<ConstraintSpec> ConstraintSpec::FromJson(const Json& j) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return absl::InvalidArgumentError("constraint: an object with a \"type\" is required");
  }
  ConstraintSpec s;
  const std::string type = j["type"].get<std::string>();
  s.reasoning = j.value("reasoning", false);
  const std::string syntax = j.value("syntax", "glm");
  if (syntax != "glm" && syntax != "dsml") return absl::InvalidArgumentError("constraint: syntax must be glm or dsml");
  s.syntax = syntax == "glm" ? ToolSyntax::kGlm : ToolSyntax::kDsml;
  const Json paths = j.value("paths", Json::object());
  if (type == "json_object") {
    s.kind = Kind::kJsonObject;
  } else if (type == "json_schema") {
    s.kind = Kind::kJsonSchema;
    if (!j.contains("schema")) return absl::InvalidArgumentError("constraint: json_schema needs a schema");
    s.schema = j["schema"];
    s.schema_path = paths.value("schema", s.schema_path);
  } else if (type == "tool_calls") {
    s.kind = Kind::kToolCalls;
    s.parallel = j.value("parallel", true);
    const Json tools = j.value("tools", Json::array());
    const Json tool_paths = paths.value("tools", Json::array());
    if (!tools.is_array()) return absl::InvalidArgumentError("constraint: tools must be an array");
    for (size_t i = 0; i < tools.size(); ++i) {
      const Json& t = tools[i];
      if (!t.is_object() || !t.contains("name") || !t["name"].is_string()) {
        return absl::InvalidArgumentError("constraint: each tool needs a name");
      }
      ToolSpec tool;
      tool.name = t["name"].get<std::string>();
      tool.parameters = t.value("parameters", Json::object());
      tool.path = i < tool_paths.size() && tool_paths[i].is_string() ? tool_paths[i].get<std::string>()
                                                                     : absl::StrCat("tools[", i, "].function.parameters");
      s.tools.push_back(std::move(tool));
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat("constraint: unknown type \"", type, "\""));
  }
  return s;
}

Json ConstraintSpec::ToJson() const {
  Json j;
  Json paths = Json::object();
  switch (kind) {
    case Kind::kJsonObject:
      j["type"] = "json_object";
      break;
    case Kind::kJsonSchema:
      j["type"] = "json_schema";
      j["schema"] = schema;
      paths["schema"] = schema_path;
      break;
    case Kind::kToolCalls: {
      j["type"] = "tool_calls";
      Json tools = Json::array(), tool_paths = Json::array();
      for (const ToolSpec& t : this->tools) {
        tools.push_back({{"name", t.name}, {"parameters", t.parameters}});
        tool_paths.push_back(t.path);
      }
      j["tools"] = std::move(tools);
      j["parallel"] = parallel;
      paths["tools"] = std::move(tool_paths);
      break;
    }
  }
  j["syntax"] = SyntaxName(syntax);
  j["reasoning"] = reasoning;
  j["paths"] = std::move(paths);
  return j;
}

std::vector<int32_t> SpecialTokensOf(const TokenVocab& vocab, const std::vector<std::string>& tags) {
  std::vector<int32_t> out;
  for (int32_t id : vocab.special_ids()) {
    const absl::string_view text = vocab.bytes(id);
    for (const std::string& tag : tags) {
      if (!text.empty() && absl::StrContains(tag, text)) {
        out.push_back(id);
        break;
      }
    }
  }
  return out;
}

absl::StatusOr<CompiledConstraint> CompileConstraint(const ConstraintSpec& spec, const TokenVocab* vocab) {
  Grammar g;
  CompiledConstraint out;
  std::vector<Expr> parts;
  if (spec.reasoning) {
    // Free text up to </think>; the call opener would end reasoning in the
    // output parser, so it cannot be inside.
    const std::string opener = ToolCallOpener(spec.syntax);
    const std::string key = absl::StrCat("reasoning.v1.", SyntaxName(spec.syntax));
    const int rule = g.Add(key, Automaton(TextUntil("</think>", {opener})), key);
    parts.push_back(Call(rule));
    out.special_tags.push_back("</think>");
  }
  if (spec.kind == ConstraintSpec::Kind::kToolCalls) {
    SPAR_ASSIGN_OR_RETURN(Expr calls, ToolCallsExpr(&g, spec.syntax, spec.tools, spec.parallel));
    parts.push_back(std::move(calls));
    for (std::string& t : ToolCallTags(spec.syntax)) out.special_tags.push_back(std::move(t));
  } else {
    JsonRules json(&g, JsonFamily::Plain());
    parts.push_back(json.Ws());
    if (spec.kind == ConstraintSpec::Kind::kJsonObject) {
      parts.push_back(json.Object());
    } else {
      JsonSchemaCompiler schemas(&g, &json, spec.schema, spec.schema_path);
      SPAR_ASSIGN_OR_RETURN(Expr value, schemas.CompileRoot());
      parts.push_back(std::move(value));
    }
  }
  g.set_root(g.Add("output", Seq(std::move(parts))));
  CompiledGrammar::LiteralTokens literal_tokens;
  std::vector<int32_t> specials;
  if (vocab != nullptr) {
    specials = SpecialTokensOf(*vocab, out.special_tags);
    literal_tokens = [vocab, &specials](absl::string_view text) { return vocab->MinTokens(text, specials); };
  }
  auto compiled = CompiledGrammar::Compile(g, literal_tokens);
  if (!compiled.ok()) {
    const std::string where = spec.kind == ConstraintSpec::Kind::kToolCalls ? "tools" : spec.schema_path;
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", compiled.status().message()));
  }
  out.grammar = *compiled;
  return out;
}

}  // namespace spar::grammar
