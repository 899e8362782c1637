// Evaluates a parsed template (jinja_ast.h) against a context, within
// resource limits, so that a hostile template or message cannot hang or
// exhaust the server: every failure is a status naming the template line.
#ifndef SPAR_TEXT_JINJA_INTERPRETER_H_
#define SPAR_TEXT_JINJA_INTERPRETER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "text/jinja_ast.h"
#include "text/jinja_value.h"

namespace spar {
namespace jinja {

struct RenderLimits {
  size_t max_output_bytes = 32 << 20;
  // Bytes of strings built by operators and filters over the whole render;
  // bounds memory when a loop keeps building strings it never prints.
  size_t max_string_bytes = 256 << 20;
  // Expression evaluations plus statement executions, loop iterations
  // included.
  int64_t max_steps = 20'000'000;
  int max_call_depth = 64;  // macro recursion
};

class Interpreter {
 public:
  explicit Interpreter(const RenderLimits& limits) : limits_(limits) {}

  // `context` must be an object; its keys become the template's variables.
  absl::StatusOr<std::string> Render(const Body& body, const Value& context);

  // For native functions and the builtins (jinja_builtins.h).
  absl::Status Error(absl::string_view what) const;
  absl::Status ChargeString(size_t bytes);
  // Counts one evaluation step (loops inside builtins count their items).
  absl::Status Step();
  absl::StatusOr<Value> CallMacro(const Stmt& macro, CallArgs& args);
  absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& v, CallArgs& args);
  absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& v, const CallArgs& args);
  // `obj.name(args)` for a method of obj's type; *found false (and
  // undefined returned) when its type has none of that name.
  absl::StatusOr<Value> CallMethod(const Value& obj, const std::string& name, CallArgs& args, bool* found);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  using Scope = absl::flat_hash_map<std::string, Value>;

  absl::Status Exec(const Body& body, Flow* flow);
  absl::Status ExecStmt(const Stmt& s, Flow* flow);
  absl::Status ExecFor(const Stmt& s);
  absl::StatusOr<Value> Eval(const Expr& e);
  absl::StatusOr<Value> EvalBinary(const Expr& e);
  absl::StatusOr<Value> EvalCall(const Expr& e);
  absl::StatusOr<Value> EvalFilter(const Expr& e);
  absl::StatusOr<bool> EvalTest(const Expr& e);
  absl::Status EvalArgs(const Expr& e, size_t first, CallArgs* args);

  absl::StatusOr<Value> Global(const std::string& name, bool* found);

  Value Lookup(const std::string& name) const;
  void Assign(const std::string& name, Value v);
  absl::Status Emit(absl::string_view text);
  absl::Status ChargeCopy(const Value& v);

  RenderLimits limits_;
  std::vector<Scope> scopes_;
  std::vector<std::string> outputs_;
  size_t total_output_ = 0;
  size_t total_strings_ = 0;
  int64_t steps_ = 0;
  int call_depth_ = 0;
  int line_ = 0;
};

}  // namespace jinja
}  // namespace spar

#endif  // SPAR_TEXT_JINJA_INTERPRETER_H_
