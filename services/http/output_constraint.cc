#include "services/http/output_constraint.h"

#include <mutex>
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "services/common/status_field.h"

namespace spar::http {
namespace {

absl::Status Bad(const std::string& field, absl::string_view message) {
  return WithField(absl::InvalidArgumentError(absl::StrCat(field, " ", message)), field);
}

// Compiling is what validates a spec; agents send the same tools and
// schemas turn after turn, so outcomes are remembered (bounded).
absl::Status Validate(const grammar::ConstraintSpec& spec) {
  static std::mutex mu;
  static auto* seen = new std::unordered_map<std::string, absl::Status>();
  const std::string key = spec.Key();
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = seen->find(key); it != seen->end()) return it->second;
  }
  absl::Status s = grammar::CompileConstraint(spec).status();
  std::lock_guard<std::mutex> lock(mu);
  if (seen->size() >= 256) seen->clear();
  seen->emplace(key, s);
  return s;
}

}  // namespace

absl::StatusOr<std::optional<OutputConstraint>> ParseResponseFormat(const Json& format) {
  if (!format.is_object()) return WrongType("response_format", "an object", format);
  const Json* type = Find(format, "type");
  if (type == nullptr || !type->is_string()) {
    return Bad("response_format.type", "must be \"text\", \"json_object\" or \"json_schema\"");
  }
  const std::string t = type->get<std::string>();
  for (auto it = format.begin(); it != format.end(); ++it) {
    if (it.key() != "type" && !(t == "json_schema" && it.key() == "json_schema")) {
      return Bad(absl::StrCat("response_format.", it.key()), "is not a field of this response_format type");
    }
  }
  OutputConstraint c;
  c.field = "response_format";
  if (t == "text") return std::optional<OutputConstraint>();
  if (t == "json_object") {
    c.spec.kind = grammar::ConstraintSpec::Kind::kJsonObject;
    return std::optional<OutputConstraint>(std::move(c));
  }
  if (t != "json_schema") {
    return Bad("response_format.type",
               absl::StrCat("\"", t, "\" is not supported (text, json_object or json_schema)"));
  }
  const Json* js = Find(format, "json_schema");
  if (js == nullptr || !js->is_object()) return Bad("response_format.json_schema", "must be an object");
  for (auto it = js->begin(); it != js->end(); ++it) {
    const std::string& k = it.key();
    if (k != "name" && k != "schema" && k != "strict" && k != "description") {
      return Bad(absl::StrCat("response_format.json_schema.", k), "is not a known field (name, schema, strict, description)");
    }
  }
  if (const Json* name = Find(*js, "name"); name != nullptr && !name->is_string()) {
    return WrongType("response_format.json_schema.name", "a string", *name);
  }
  if (const Json* strict = Find(*js, "strict"); strict != nullptr && !strict->is_boolean()) {
    return WrongType("response_format.json_schema.strict", "a boolean", *strict);
  }
  c.spec.kind = grammar::ConstraintSpec::Kind::kJsonSchema;
  const Json* schema = Find(*js, "schema");
  // No schema: any JSON value (as OpenAI's API treats an empty one).
  c.spec.schema = schema != nullptr ? *schema : Json::object();
  c.spec.schema_path = "response_format.json_schema.schema";
  if (!c.spec.schema.is_object() && !c.spec.schema.is_boolean()) {
    return WrongType(c.spec.schema_path, "a JSON schema (an object)", c.spec.schema);
  }
  return std::optional<OutputConstraint>(std::move(c));
}

absl::StatusOr<OutputConstraint> ToolCallConstraint(const ToolChoice& choice, const Json& tools,
                                                    const std::function<std::string(size_t)>& parameters_path,
                                                    const std::string& choice_field) {
  OutputConstraint c;
  c.field = choice_field;
  c.spec.kind = grammar::ConstraintSpec::Kind::kToolCalls;
  c.spec.parallel = choice.name ? false : choice.parallel;
  if (!tools.is_array() || tools.empty()) {
    return Bad(choice_field, "needs tools: a tool call is required but the request offers none");
  }
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& fn = tools[i]["function"];
    const std::string name = fn.value("name", "");
    if (choice.name && name != *choice.name) continue;
    grammar::ToolSpec t;
    t.name = name;
    t.parameters = fn.contains("parameters") && fn["parameters"].is_object() ? fn["parameters"] : Json::object();
    t.path = parameters_path(i);
    c.spec.tools.push_back(std::move(t));
  }
  if (c.spec.tools.empty()) {
    return Bad(choice_field, absl::StrCat("names the tool \"", choice.name.value_or(""), "\", which is not in tools"));
  }
  return c;
}

absl::Status ApplyOutputConstraint(OutputConstraint c, const ChatOutputSyntax& syntax, GenerateParams* p) {
  const bool calls = c.spec.kind == grammar::ConstraintSpec::Kind::kToolCalls;
  if (calls && !syntax.tool_calls) {
    return Bad(c.field, "needs the server's tool-call parser for this model (--tool-call-parser)");
  }
  c.spec.syntax = syntax.format == ToolCallFormat::kDsml ? grammar::ToolSyntax::kDsml : grammar::ToolSyntax::kGlm;
  c.spec.reasoning = syntax.reasoning && syntax.starts_in_reasoning;
  if (absl::Status s = Validate(c.spec); !s.ok()) {
    // Messages begin with the path of what failed ("tools[1].function.parameters.properties.x.pattern ...").
    const std::string message(s.message());
    std::string field = c.field;
    const std::string first = message.substr(0, message.find_first_of(" :"));
    if (absl::StartsWith(first, "response_format") || absl::StartsWith(first, "tools")) field = first;
    return WithField(absl::InvalidArgumentError(message), field);
  }
  p->constraint = c.spec.Key();
  p->skip_special_tokens = false;
  return absl::OkStatus();
}

}  // namespace spar::http
