#include "services/common/args.h"

#include <iostream>

#include <cctype>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace spar {

void ArgParser::AddString(const std::string& name, std::string* out, std::string help) {
  flags_[name] = {Kind::kString, out, std::move(help)};
}
void ArgParser::AddInt(const std::string& name, int64_t* out, std::string help) {
  flags_[name] = {Kind::kInt, out, std::move(help)};
}
void ArgParser::AddDouble(const std::string& name, double* out, std::string help) {
  flags_[name] = {Kind::kDouble, out, std::move(help)};
}
void ArgParser::AddBool(const std::string& name, bool* out, std::string help) {
  flags_[name] = {Kind::kBool, out, std::move(help)};
}

absl::Status ArgParser::Set(const std::string& name, const Flag& flag, const std::string& value) {
  auto bad = [&](const char* what) {
    return absl::InvalidArgumentError(absl::StrCat(command_, ": --", name, " ", what, ", got \"", value, "\""));
  };
  switch (flag.kind) {
    case Kind::kString:
      *static_cast<std::string*>(flag.out) = value;
      return absl::OkStatus();
    case Kind::kInt:
      if (!absl::SimpleAtoi(value, static_cast<int64_t*>(flag.out))) return bad("needs an integer");
      return absl::OkStatus();
    case Kind::kDouble:
      if (!absl::SimpleAtod(value, static_cast<double*>(flag.out))) return bad("needs a number");
      return absl::OkStatus();
    case Kind::kBool:
      if (!absl::SimpleAtob(value, static_cast<bool*>(flag.out))) return bad("needs true or false");
      return absl::OkStatus();
  }
  return absl::InternalError("unreachable");
}

std::string ArgParser::EnvName(const std::string& name) const {
  if (env_prefix_.empty()) return "";
  std::string env = env_prefix_;
  for (char c : name) env.push_back(c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  return env;
}

absl::Status ArgParser::Parse(int argc, char** argv, int begin) {
  if (!env_prefix_.empty()) {
    for (const auto& [name, flag] : flags_) {
      const std::string env = EnvName(name);
      const char* value = std::getenv(env.c_str());
      if (value == nullptr) continue;
      if (auto s = Set(name, flag, value); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(s.message(), " (from the environment variable ", env, ")"));
      }
      set_.insert(name);
    }
  }
  for (int i = begin; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      help_ = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      positional_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2), value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto it = flags_.find(name);
    if (it == flags_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(command_, ": unknown flag --", name, " (see --help)"));
    }
    if (!has_value) {
      if (it->second.kind == Kind::kBool) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat(command_, ": --", name, " needs a value"));
      }
    }
    if (auto s = Set(name, it->second, value); !s.ok()) return s;
    set_.insert(name);
  }
  return absl::OkStatus();
}

std::optional<int> ArgParser::ParseOrExitCode(int argc, char** argv, int begin, absl::string_view intro) {
  if (absl::Status s = Parse(argc, argv, begin); !s.ok()) {
    std::cerr << s.message() << "\n";
    return 2;
  }
  if (help_) {
    std::cout << intro << Usage();
    return 0;
  }
  return std::nullopt;
}

std::string ArgParser::Usage() const {
  std::string out = absl::StrCat("usage: spar ", command_, " [flags]\n");
  for (const auto& [name, flag] : flags_) {
    absl::StrAppend(&out, "  --", name, "  ", flag.help);
    if (!env_prefix_.empty()) absl::StrAppend(&out, " [$", EnvName(name), "]");
    absl::StrAppend(&out, "\n");
  }
  return out;
}

}  // namespace spar
