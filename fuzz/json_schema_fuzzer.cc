// Fuzzes constrained decoding's compilers with arbitrary client JSON: the
// JSON Schema of response_format (byte 0 & 3 == 0), or a tool list in GLM's
// (1) or DeepSeek's DSML (2) syntax; byte 0 & 4 adds the reasoning prefix.
// The rest is the JSON. Properties: no crash; a refusal is INVALID_ARGUMENT
// (what the HTTP layer answers as a 400 naming the field); a grammar that
// compiles can always be completed — from the start, following bytes that
// lower the shortest-completion distance, it reaches an accepting state in
// exactly as many bytes as the distance said.
//
// Repetition bounds above 64 are skipped: they are legitimate but slow to
// compile (up to the 200K-state bound), and the gate's runs must be fast.
#include <cstdint>
#include <string>

#include "fuzz/fuzz_check.h"
#include "grammar/constraint.h"
#include "grammar/matcher.h"
#include "nlohmann/json.hpp"

namespace {

using Json = nlohmann::ordered_json;

bool SmallNumbers(const Json& j) {
  if (j.is_number()) return !(j.get<double>() > 64 || j.get<double>() < -1e6);
  if (j.is_array() || j.is_object()) {
    for (const Json& v : j) {
      if (!SmallNumbers(v)) return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 4096) return 0;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !SmallNumbers(j)) return 0;
  spar::grammar::ConstraintSpec spec;
  spec.reasoning = data[0] & 4;
  switch (data[0] & 3) {
    case 0:
      spec.kind = spar::grammar::ConstraintSpec::Kind::kJsonSchema;
      spec.schema = j;
      break;
    default: {
      spec.kind = spar::grammar::ConstraintSpec::Kind::kToolCalls;
      spec.syntax = (data[0] & 3) == 1 ? spar::grammar::ToolSyntax::kGlm : spar::grammar::ToolSyntax::kDsml;
      spec.parallel = data[0] & 8;
      if (!j.is_array()) return 0;
      for (size_t i = 0; i < j.size() && i < 8; ++i) {
        spar::grammar::ToolSpec t;
        t.name = j[i].is_object() && j[i].contains("name") && j[i]["name"].is_string() ? j[i]["name"].get<std::string>()
                                                                                       : "f";
        t.parameters = j[i].is_object() && j[i].contains("parameters") ? j[i]["parameters"] : Json::object();
        t.path = "tools";
        spec.tools.push_back(std::move(t));
      }
      break;
    }
  }
  auto compiled = spar::grammar::CompileConstraint(spec);
  if (!compiled.ok()) {
    SPAR_FUZZ_CHECK(compiled.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  // Follow the shortest completion byte by byte.
  spar::grammar::GrammarMatcher m(compiled->grammar);
  int32_t cost = m.min_cost();
  SPAR_FUZZ_CHECK(cost < spar::grammar::CompiledGrammar::kUnreachable);
  for (int steps = 0; !m.accepting(); ++steps) {
    SPAR_FUZZ_CHECK(steps < 20000);
    int best_byte = -1;
    int32_t best = cost;
    for (int b = 0; b < 256; ++b) {
      const auto o = m.Probe(std::string(1, static_cast<char>(b)));
      if (o.ok && o.min_cost < best) {
        best = o.min_cost;
        best_byte = b;
      }
    }
    SPAR_FUZZ_CHECK(best_byte >= 0 && best == cost - 1);
    SPAR_FUZZ_CHECK(m.Advance(std::string(1, static_cast<char>(best_byte))));
    cost = m.min_cost();
  }
  SPAR_FUZZ_CHECK(cost == 0);
  return 0;
}
