// Command-line flags for spar's subcommands: `--name value` or
// `--name=value`, booleans as `--name` / `--name=false`. Unknown flags and
// malformed values are errors that name the flag.
#ifndef SPAR_SERVICES_CLI_ARGS_H_
#define SPAR_SERVICES_CLI_ARGS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace spar {

class ArgParser {
 public:
  explicit ArgParser(std::string command) : command_(std::move(command)) {}

  void AddString(const std::string& name, std::string* out, std::string help);
  void AddInt(const std::string& name, int64_t* out, std::string help);
  void AddDouble(const std::string& name, double* out, std::string help);
  void AddBool(const std::string& name, bool* out, std::string help);

  // Parses argv[begin..argc). Positional arguments are collected.
  absl::Status Parse(int argc, char** argv, int begin);
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
  std::map<std::string, Flag> flags_;
  std::vector<std::string> positional_;
  bool help_ = false;
};

}  // namespace spar

#endif  // SPAR_SERVICES_CLI_ARGS_H_
