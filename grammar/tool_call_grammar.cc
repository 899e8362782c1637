#include "grammar/tool_call_grammar.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "grammar/json_rules.h"
#include "grammar/json_schema.h"
#include "grammar/json_text.h"
#include "grammar/member_order.h"

namespace spar::grammar {
namespace {

#define SPAR_DSML "\xef\xbd\x9c" "DSML" "\xef\xbd\x9c"  // ｜DSML｜

struct Syntax {
  JsonFamily family;
  std::string value_close;                 // the tag after a value
  std::vector<std::string> raw_forbidden;  // never inside a raw value (the close tag included)
  const char* raw_key;                     // shared key of the unbounded raw value rule
};

Syntax SyntaxOf(ToolSyntax s) {
  if (s == ToolSyntax::kGlm) {
    return {JsonFamily::Glm(), "</arg_value>", {"</arg_value>", "</tool_call>"}, "glm.v1.raw"};
  }
  return {JsonFamily::Dsml(), "</" SPAR_DSML "parameter>", {SPAR_DSML}, "dsml.v1.raw"};
}

absl::Status Bad(const std::string& path, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(path, " ", message));
}

// A string value written as is, with the closing tag after it: enum /
// const choices, a length bound, or any text without the closing tags. The
// tag belongs to the value's rule so the rule ends only there (a rule that
// could end after any byte would make most tokens escape its table).
absl::StatusOr<Expr> RawValue(Grammar* g, const Syntax& syn, const Json& schema, const std::string& path) {
  auto usable = [&](const Json& v) {
    if (!v.is_string()) return false;
    for (const std::string& f : syn.raw_forbidden) {
      if (absl::StrContains(v.get_ref<const std::string&>(), f)) return false;
    }
    return true;
  };
  std::vector<Expr> choices;
  const Expr close = Lit(syn.value_close);
  if (schema.contains("const")) {
    if (usable(schema["const"])) choices.push_back(Lit(schema["const"].get<std::string>() + syn.value_close));
    return Alt(std::move(choices));
  }
  if (schema.contains("enum")) {
    if (!schema["enum"].is_array()) return Bad(absl::StrCat(path, ".enum"), "must be an array");
    for (const Json& v : schema["enum"]) {
      if (usable(v)) choices.push_back(Lit(v.get<std::string>() + syn.value_close));
    }
    return Alt(std::move(choices));
  }
  for (const char* k : {"pattern"}) {
    if (schema.contains(k)) return Bad(absl::StrCat(path, ".", k), "is not supported by constrained decoding");
  }
  auto count = [&](const char* key, int dflt) -> absl::StatusOr<int> {
    if (!schema.contains(key)) return dflt;
    const Json& v = schema[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 1024) {
      return Bad(absl::StrCat(path, ".", key), "must be an integer in [0, 1024] for constrained decoding");
    }
    return static_cast<int>(v.get<int64_t>());
  };
  SPAR_ASSIGN_OR_RETURN(const int min, count("minLength", 0));
  SPAR_ASSIGN_OR_RETURN(const int max, count("maxLength", -1));
  // The close tag has no border (no proper prefix that is also a suffix),
  // so text without it followed by it contains it exactly once, at the end.
  if (min == 0 && max < 0) {
    int rule = g->FindShared(syn.raw_key);
    if (rule < 0) {
      rule = g->Add(syn.raw_key, Seq({Automaton(RawTextDfa(0, -1, syn.raw_forbidden)), close}), syn.raw_key);
    }
    return Call(rule);
  }
  return Seq({Automaton(RawTextDfa(min, max, syn.raw_forbidden)), close});
}

absl::StatusOr<Expr> ToolCall(Grammar* g, ToolSyntax syntax, const ToolSpec& tool, JsonRules* json) {
  const Syntax syn = SyntaxOf(syntax);
  const std::string& path = tool.path;
  const Json& params = tool.parameters;
  if (!params.is_object()) return Bad(path, "must be a JSON schema object");
  for (const char* k : {"$ref", "anyOf", "oneOf", "allOf"}) {
    if (params.contains(k)) {
      return Bad(absl::StrCat(path, ".", k), "is not supported at the top of a tool's parameters by constrained decoding");
    }
  }
  if (params.contains("type") && params["type"] != "object") return Bad(absl::StrCat(path, ".type"), "must be \"object\"");
  const Json props = params.value("properties", Json::object());
  if (!props.is_object()) return Bad(absl::StrCat(path, ".properties"), "must be an object");
  std::vector<std::string> required;
  if (params.contains("required")) {
    if (!params["required"].is_array()) return Bad(absl::StrCat(path, ".required"), "must be an array of strings");
    for (const Json& r : params["required"]) {
      if (!r.is_string()) return Bad(absl::StrCat(path, ".required"), "must be an array of strings");
      if (!props.contains(r.get<std::string>())) {
        return Bad(absl::StrCat(path, ".required"),
                   absl::StrCat("names \"", r.get<std::string>(), "\", which is not in properties"));
      }
      required.push_back(r.get<std::string>());
    }
  }
  if (tool.name.empty() || absl::StrContains(tool.name, "<") || absl::StrContains(tool.name, "\"") ||
      absl::StrContains(tool.name, "\n")) {
    return Bad(path, absl::StrCat("belongs to a tool whose name \"", tool.name,
                                  "\" cannot be written in this model's tool-call syntax"));
  }
  JsonSchemaCompiler schemas(g, json, params, path);
  std::vector<Member> members;
  for (auto it = props.begin(); it != props.end(); ++it) {
    const std::string& key = it.key();
    const std::string where = absl::StrCat(path, ".properties.", key);
    if (key.empty() || absl::StrContains(key, "<") || absl::StrContains(key, "\"") || absl::StrContains(key, "\n")) {
      return Bad(where, "is a name this model's tool-call syntax cannot write");
    }
    const bool req = std::find(required.begin(), required.end(), key) != required.end();
    const Json* string_only = schemas.StringOnly(it.value());
    Expr value;
    if (string_only != nullptr) {
      SPAR_ASSIGN_OR_RETURN(value, RawValue(g, syn, *string_only, where));
    } else {
      SPAR_ASSIGN_OR_RETURN(value, schemas.Compile(it.value(), where));
    }
    if (value.kind == Expr::Kind::kAlt && value.items.empty()) {
      if (req) return Bad(where, "cannot be satisfied by any value but is required");
      continue;
    }
    if (value.kind != Expr::Kind::kCall) value = Call(g->Add(where, std::move(value)));
    if (syntax == ToolSyntax::kGlm) {
      const Expr nl = Opt(Lit("\n"));
      members.push_back({Seq({Lit("<arg_key>"), Lit(key), Lit("</arg_key>"), nl, Lit("<arg_value>"), value,
                              string_only != nullptr ? Empty() : Lit(syn.value_close), nl}),
                         req});
    } else {
      members.push_back({Seq({Lit("<" SPAR_DSML "parameter name=\""), Lit(key),
                              Lit(string_only != nullptr ? "\" string=\"true\">" : "\" string=\"false\">"), value,
                              string_only != nullptr ? Empty() : Lit(syn.value_close)}),
                         req});
    }
  }
  const std::string rule_name = absl::StrCat("tool ", tool.name);
  if (syntax == ToolSyntax::kGlm) {
    const Expr args = OrderedMembers(g, members, Empty(), rule_name);
    return Call(g->Add(rule_name, Seq({Lit("<tool_call>"), Lit(tool.name), Opt(Lit("\n")), args, Lit("</tool_call>")})));
  }
  const Expr args = OrderedMembers(g, members, Lit("\n"), rule_name);
  return Call(g->Add(rule_name, Seq({Lit("<" SPAR_DSML "invoke name=\""), Lit(tool.name), Lit("\">\n"), args,
                                     Lit("\n</" SPAR_DSML "invoke>")})));
}

}  // namespace

absl::StatusOr<Expr> ToolCallsExpr(Grammar* g, ToolSyntax syntax, const std::vector<ToolSpec>& tools, bool parallel) {
  if (tools.empty()) return absl::InvalidArgumentError("tools: a constrained tool call needs at least one tool");
  JsonRules json(g, SyntaxOf(syntax).family);
  std::vector<Expr> calls;
  for (const ToolSpec& t : tools) {
    SPAR_ASSIGN_OR_RETURN(Expr c, ToolCall(g, syntax, t, &json));
    calls.push_back(std::move(c));
  }
  const Expr any = Alt(std::move(calls));
  if (syntax == ToolSyntax::kGlm) {
    return Seq({Opt(Lit("\n")), any, parallel ? Star(Seq({Opt(Lit("\n")), any})) : Empty()});
  }
  return Seq({Lit("\n\n<" SPAR_DSML "function_calls>\n"), any, parallel ? Star(Seq({Lit("\n"), any})) : Empty(),
              Lit("\n</" SPAR_DSML "function_calls>")});
}

std::vector<std::string> ToolCallTags(ToolSyntax syntax) {
  if (syntax == ToolSyntax::kGlm) {
    return {"<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"};
  }
  return {"<" SPAR_DSML "function_calls>", "</" SPAR_DSML "function_calls>", "<" SPAR_DSML "invoke name=\"",
          "</" SPAR_DSML "invoke>", "<" SPAR_DSML "parameter name=\"", "</" SPAR_DSML "parameter>"};
}

std::string ToolCallOpener(ToolSyntax syntax) {
  return syntax == ToolSyntax::kGlm ? "<tool_call>" : "<" SPAR_DSML "function_calls";
}

}  // namespace spar::grammar
