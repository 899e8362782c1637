// DeepSeek-V3.2's DSML tool calls (its encoding_dsv32.py writes them; the
// official parser reads them back):
//
//   <｜DSML｜function_calls>
//   <｜DSML｜invoke name="get_weather">
//   <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
//   <｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
//   </｜DSML｜invoke>
//   </｜DSML｜function_calls>
//
// string="true": the value is the string itself; "false": JSON. Variants
// models are seen to write are accepted too: ASCII pipes (|DSML|), no
// DSML prefix at all (<function_calls>, <invoke>, <parameter>), attributes
// in any order, a missing string attribute (then the tool's schema types
// the value, as for GLM), any whitespace between tags. One block uses one
// prefix throughout.
#ifndef SPAR_TEXT_DSML_TOOL_CALLS_H_
#define SPAR_TEXT_DSML_TOOL_CALLS_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "text/chat_output_parser.h"

namespace spar {

// The block tags: opener i closes with closer i; opener i uses prefix i.
const std::vector<std::string>& DsmlBlockOpeners();
const std::vector<std::string>& DsmlBlockClosers();
const std::vector<std::string>& DsmlPrefixes();

// The calls inside a block (between its opener and closer) whose tags use
// `prefix`; false (and *calls untouched) when it is not well-formed.
bool ParseDsmlCalls(absl::string_view inner, absl::string_view prefix, std::vector<ToolCallText>* calls);

}  // namespace spar

#endif  // SPAR_TEXT_DSML_TOOL_CALLS_H_
