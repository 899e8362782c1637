// Command-line flags for spar's commands and daemons: `--name value` or
// `--name=value`, booleans as `--name` / `--name=false`. Unknown flags and
// malformed values are errors that name the flag.
//
// With an environment prefix (daemons use "SPAR_"), every flag can also be
// set by the environment: --num-blocks reads SPAR_NUM_BLOCKS. The command
// line wins over the environment, the environment over the built-in
// default, so one container image runs on a laptop (flags) and under
// Kubernetes (env from a ConfigMap or the LeaderWorkerSet).
//
// Thread-compatible; used once at start-up.
#ifndef SPAR_SERVICES_COMMON_ARGS_H_
#define SPAR_SERVICES_COMMON_ARGS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace spar {

class ArgParser {
 public:
  explicit ArgParser(std::string command, std::string env_prefix = "")
      : command_(std::move(command)), env_prefix_(std::move(env_prefix)) {}

  void AddString(const std::string& name, std::string* out, std::string help);
  void AddInt(const std::string& name, int64_t* out, std::string help);
  void AddDouble(const std::string& name, double* out, std::string help);
  void AddBool(const std::string& name, bool* out, std::string help);

  // Applies the environment (when a prefix is set), then parses
  // argv[begin..argc). Positional arguments are collected.
  absl::Status Parse(int argc, char** argv, int begin);
  // Parse for a command's main(): on a bad flag prints the error (exit code
  // 2), on --help prints `intro` and the usage (exit code 0); returns the
  // exit code when the command must stop, nullopt when it should run.
  std::optional<int> ParseOrExitCode(int argc, char** argv, int begin, absl::string_view intro = "");
  // The environment variable that sets flag `name` ("" without a prefix).
  std::string EnvName(const std::string& name) const;
  // Whether the flag was given on the command line or in the environment.
  bool IsSet(const std::string& name) const { return set_.count(name) > 0; }
  const std::vector<std::string>& positional() const { return positional_; }
  bool help_requested() const { return help_; }
  std::string Usage() const;

 private:
  enum class Kind { kString, kInt, kDouble, kBool };
  struct Flag {
    Kind kind;
    void* out;
    std::string help;
  };
  absl::Status Set(const std::string& name, const Flag& flag, const std::string& value);

  std::string command_;
  std::string env_prefix_;
  std::map<std::string, Flag> flags_;
  std::set<std::string> set_;
  std::vector<std::string> positional_;
  bool help_ = false;
};

}  // namespace spar

#endif  // SPAR_SERVICES_COMMON_ARGS_H_
