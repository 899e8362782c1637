// Tool calls in the model's own syntax, as a grammar whose sentences are
// well-formed calls with arguments valid against each tool's JSON schema
// (tool_choice "required" or a named function):
//
//   GLM-4.5 .. GLM-5 (text/chat_output_parser.h):
//     <tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>...</tool_call>
//     (an optional newline after the name and around each pair, as the
//     GLM-4.5 template writes them; GLM-5's has none)
//   DeepSeek-V3.2 DSML (text/dsml_output_parser.h):
//     \n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name="NAME">\n
//     <｜DSML｜parameter name="KEY" string="true|false">VALUE</｜DSML｜parameter>\n...
//     </｜DSML｜invoke>\n</｜DSML｜function_calls>
//
// A parameter whose schema is exactly {"type": "string"} (plus string
// keywords) is written raw, as both formats write strings (GLM: typed by
// the schema; DSML: string="true"), and never contains the closing tags;
// every other value is JSON of the tag-safe family (json_rules.h).
// Arguments come in the schema's property order, the required ones always.
#ifndef SPAR_GRAMMAR_TOOL_CALL_GRAMMAR_H_
#define SPAR_GRAMMAR_TOOL_CALL_GRAMMAR_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grammar/grammar.h"
#include "nlohmann/json.hpp"

namespace spar::grammar {

enum class ToolSyntax { kGlm, kDsml };

struct ToolSpec {
  std::string name;
  nlohmann::ordered_json parameters = nlohmann::ordered_json::object();  // a JSON schema
  std::string path;  // how errors name the parameters, e.g. "tools[1].function.parameters"
};

// One or more calls (`parallel`), or exactly one, of any of `tools`.
absl::StatusOr<Expr> ToolCallsExpr(Grammar* grammar, ToolSyntax syntax, const std::vector<ToolSpec>& tools,
                                   bool parallel);

// The tags the syntax writes (special tokens with this text may be
// sampled where the grammar allows them), and the text that opens a call
// block (which reasoning must not contain: it ends reasoning).
std::vector<std::string> ToolCallTags(ToolSyntax syntax);
std::string ToolCallOpener(ToolSyntax syntax);

}  // namespace spar::grammar

#endif  // SPAR_GRAMMAR_TOOL_CALL_GRAMMAR_H_
