#include "engine/weight_format.h"

#include <algorithm>
#include <regex>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"

namespace spar {
namespace {

using json = nlohmann::json;

// Reads fields of one JSON object; every error names the file and the field
// path ("config.json: field \"quantization_config.bits\" ...").
class Fields {
 public:
  Fields(const json& obj, std::string file, std::string path)
      : obj_(obj), file_(std::move(file)), path_(std::move(path)) {}

  absl::Status Error(absl::string_view field, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(file_, ": field \"", Path(field), "\" ", what));
  }
  std::string Path(absl::string_view field) const { return path_.empty() ? std::string(field) : absl::StrCat(path_, ".", field); }
  bool Has(const char* name) const { return obj_.contains(name) && !obj_.at(name).is_null(); }
  const json& At(const char* name) const { return obj_.at(name); }
  Fields Sub(const char* name) const { return Fields(obj_.at(name), file_, Path(name)); }

  absl::StatusOr<int64_t> Int(const char* name) const {
    if (!Has(name)) return Error(name, "is missing");
    const json& v = obj_.at(name);
    if (!v.is_number_integer()) return Error(name, absl::StrCat("must be an integer, got ", v.dump()));
    return v.get<int64_t>();
  }
  // The first of `names` present (AWQ spells fields two ways).
  absl::StatusOr<int64_t> IntOf(std::initializer_list<const char*> names) const {
    for (const char* n : names) {
      if (Has(n)) return Int(n);
    }
    return Error(*names.begin(), "is missing");
  }
  absl::StatusOr<bool> Bool(const char* name) const {
    if (!Has(name)) return Error(name, "is missing");
    const json& v = obj_.at(name);
    if (!v.is_boolean()) return Error(name, absl::StrCat("must be true or false, got ", v.dump()));
    return v.get<bool>();
  }
  absl::StatusOr<bool> BoolOr(const char* name, bool fallback) const {
    if (!Has(name)) return fallback;
    return Bool(name);
  }
  absl::StatusOr<std::string> String(const char* name) const {
    if (!Has(name)) return Error(name, "is missing");
    const json& v = obj_.at(name);
    if (!v.is_string()) return Error(name, absl::StrCat("must be a string, got ", v.dump()));
    return v.get<std::string>();
  }
  absl::StatusOr<std::string> StringOr(const char* name, std::string fallback) const {
    if (!Has(name)) return fallback;
    return String(name);
  }
  absl::StatusOr<std::vector<std::string>> StringList(const char* name) const {
    std::vector<std::string> out;
    if (!Has(name)) return out;
    const json& v = obj_.at(name);
    if (!v.is_array()) return Error(name, "must be a list of strings");
    for (const auto& e : v) {
      if (!e.is_string()) return Error(name, "must be a list of strings");
      out.push_back(e.get<std::string>());
    }
    return out;
  }
  // Absent, null, false, an empty object or an empty list.
  bool Empty(const char* name) const {
    if (!Has(name)) return true;
    const json& v = obj_.at(name);
    return (v.is_boolean() && !v.get<bool>()) || ((v.is_object() || v.is_array()) && v.empty());
  }
  absl::Status MustBeEmpty(const char* name, absl::string_view why) const {
    if (Empty(name)) return absl::OkStatus();
    return Error(name, absl::StrCat(obj_.at(name).dump(), " is not supported: ", why));
  }

 private:
  const json& obj_;
  std::string file_, path_;
};

constexpr char kConfigFile[] = "config.json";
constexpr char kHfQuantFile[] = "hf_quant_config.json";

absl::Status CheckFourBits(const Fields& f, int64_t bits, const char* name) {
  if (bits != 4) return f.Error(name, absl::StrCat("is ", bits, ": only 4-bit weights are supported"));
  return absl::OkStatus();
}

// The single group of AWQ / GPTQ / NVFP4 configs. AutoAWQ and GPTQ convert
// the linear layers inside the decoder blocks, never lm_head (GPTQ's
// lm_head: true is refused); ModelOpt converts every nn.Linear and lists what
// it leaves out (lm_head among them) in exclude_modules.
QuantGroup DecoderLinears(QuantScheme scheme) {
  QuantGroup g;
  g.targets.match = ModulePatterns::Match::kTensors;
  g.targets.patterns = {"re:model\\.layers\\."};
  g.targets.Compile().IgnoreError();  // a constant pattern
  g.scheme = scheme;
  return g;
}

// AWQ and GPTQ: one scheme over the decoder linears, minus
// modules_to_not_convert (substring matches).
absl::StatusOr<WeightFormat> DecoderLinearFormat(const Fields& f, const QuantScheme& s) {
  WeightFormat w;
  w.layout = s.layout;
  w.groups.push_back(DecoderLinears(s));
  w.not_converted.match = ModulePatterns::Match::kSubstring;
  SPAR_ASSIGN_OR_RETURN(w.not_converted.patterns, f.StringList("modules_to_not_convert"));
  return w;
}

QuantGroup AllLinear(QuantScheme scheme) {
  QuantGroup g;
  g.targets.match = ModulePatterns::Match::kTensors;
  g.targets.patterns = {"Linear"};
  g.scheme = scheme;
  return g;
}

absl::StatusOr<WeightFormat> ParseAwq(const Fields& f) {
  QuantScheme s;
  s.layout = QuantLayout::kAwq;
  SPAR_ASSIGN_OR_RETURN(int64_t bits, f.IntOf({"bits", "w_bit"}));
  SPAR_RETURN_IF_ERROR(CheckFourBits(f, bits, f.Has("bits") ? "bits" : "w_bit"));
  SPAR_ASSIGN_OR_RETURN(int64_t group, f.IntOf({"group_size", "q_group_size"}));
  if (group <= 0) return f.Error(f.Has("group_size") ? "group_size" : "q_group_size", absl::StrCat("is ", group, ": AWQ needs a positive group size"));
  s.group_size = static_cast<int>(group);
  SPAR_ASSIGN_OR_RETURN(bool zero_point, f.Bool("zero_point"));
  if (!zero_point) return f.Error("zero_point", "is false: only AWQ with zero points (the GEMM layout) is supported");
  s.zero_points = true;
  // vLLM reads every AWQ checkpoint as the GEMM layout; spar does too, but a
  // version that names another layout is refused.
  SPAR_ASSIGN_OR_RETURN(std::string version, f.StringOr("version", "gemm"));
  if (absl::AsciiStrToLower(version) != "gemm") {
    return f.Error("version", absl::StrCat("\"", version, "\" is not supported (gemm: qweight [K, N/8])"));
  }
  return DecoderLinearFormat(f, s);
}

absl::StatusOr<WeightFormat> ParseGptq(const Fields& f) {
  QuantScheme s;
  s.layout = QuantLayout::kGptq;
  SPAR_ASSIGN_OR_RETURN(int64_t bits, f.Int("bits"));
  SPAR_RETURN_IF_ERROR(CheckFourBits(f, bits, "bits"));
  SPAR_ASSIGN_OR_RETURN(int64_t group, f.Int("group_size"));
  if (group != -1 && group <= 0) return f.Error("group_size", absl::StrCat("is ", group, ": must be positive or -1 (one group per row)"));
  s.group_size = group == -1 ? 0 : static_cast<int>(group);
  SPAR_ASSIGN_OR_RETURN(bool desc_act, f.BoolOr("desc_act", false));
  if (desc_act) {
    return f.Error("desc_act", "is true: act-order checkpoints (a permuted g_idx) are not supported; "
                               "requantize with desc_act false");
  }
  // Zero points are always stored (qzeros); sym only says they are all the
  // midpoint, so the stored values are used as they are.
  SPAR_ASSIGN_OR_RETURN(bool sym, f.BoolOr("sym", true));
  (void)sym;
  s.zero_points = true;
  SPAR_ASSIGN_OR_RETURN(std::string fmt, f.StringOr("checkpoint_format", "gptq"));
  if (fmt == "gptq") {
    s.zero_plus_one = true;  // v1: stored zero = z - 1
  } else if (fmt == "gptq_v2") {
    s.zero_plus_one = false;
  } else {
    return f.Error("checkpoint_format", absl::StrCat("\"", fmt, "\" is not supported (gptq or gptq_v2)"));
  }
  SPAR_ASSIGN_OR_RETURN(bool marlin, f.BoolOr("is_marlin_format", false));
  if (marlin) return f.Error("is_marlin_format", "is true: Marlin-repacked checkpoints are not supported");
  SPAR_ASSIGN_OR_RETURN(std::string pack_dtype, f.StringOr("pack_dtype", "int32"));
  if (pack_dtype != "int32") return f.Error("pack_dtype", absl::StrCat("\"", pack_dtype, "\" is not supported (int32)"));
  SPAR_ASSIGN_OR_RETURN(bool lm_head, f.BoolOr("lm_head", false));
  if (lm_head) return f.Error("lm_head", "is true: a quantized lm_head is not supported for GPTQ");
  SPAR_RETURN_IF_ERROR(f.MustBeEmpty("dynamic", "per-module overrides are not read"));
  SPAR_RETURN_IF_ERROR(f.MustBeEmpty("modules_in_block_to_quantize", "spar reads which modules are converted from "
                                                                     "modules_to_not_convert only"));
  return DecoderLinearFormat(f, s);
}

absl::StatusOr<QuantScheme> ParseCtWeights(const Fields& f) {
  QuantScheme s;
  s.layout = QuantLayout::kPackQuantized;
  SPAR_ASSIGN_OR_RETURN(int64_t bits, f.Int("num_bits"));
  SPAR_RETURN_IF_ERROR(CheckFourBits(f, bits, "num_bits"));
  SPAR_ASSIGN_OR_RETURN(std::string type, f.String("type"));
  if (type != "int") return f.Error("type", absl::StrCat("\"", type, "\" is not supported (int)"));
  SPAR_ASSIGN_OR_RETURN(bool symmetric, f.Bool("symmetric"));
  s.zero_points = !symmetric;
  SPAR_ASSIGN_OR_RETURN(std::string strategy, f.String("strategy"));
  if (strategy == "group") {
    SPAR_ASSIGN_OR_RETURN(int64_t group, f.Int("group_size"));
    if (group <= 0) return f.Error("group_size", absl::StrCat("is ", group, ": must be positive"));
    s.group_size = static_cast<int>(group);
  } else if (strategy == "channel") {
    s.group_size = 0;
  } else {
    return f.Error("strategy", absl::StrCat("\"", strategy, "\" is not supported (group or channel)"));
  }
  SPAR_ASSIGN_OR_RETURN(bool dynamic, f.BoolOr("dynamic", false));
  if (dynamic) return f.Error("dynamic", "is true: dynamic weight quantization is not a stored format");
  SPAR_RETURN_IF_ERROR(f.MustBeEmpty("actorder", "act-order checkpoints (weight_g_idx) are not supported"));
  SPAR_RETURN_IF_ERROR(f.MustBeEmpty("block_structure", "block quantization is not the pack-quantized int4 layout"));
  return s;
}

absl::StatusOr<WeightFormat> ParseCompressedTensors(const Fields& f) {
  SPAR_ASSIGN_OR_RETURN(std::string format, f.String("format"));
  if (format != "pack-quantized") {
    return f.Error("format", absl::StrCat("\"", format, "\" is not supported (pack-quantized)"));
  }
  SPAR_ASSIGN_OR_RETURN(std::string status, f.StringOr("quantization_status", "compressed"));
  if (status != "compressed") {
    return f.Error("quantization_status", absl::StrCat("\"", status, "\": only compressed checkpoints store packed weights"));
  }
  SPAR_RETURN_IF_ERROR(f.MustBeEmpty("kv_cache_scheme", "spar's cache formats are chosen at run time"));
  SPAR_RETURN_IF_ERROR(f.MustBeEmpty("sparsity_config", "sparse checkpoints are not supported"));
  SPAR_RETURN_IF_ERROR(f.MustBeEmpty("transform_config", "weight transforms are not supported"));
  if (!f.Has("config_groups") || !f.At("config_groups").is_object() || f.At("config_groups").empty()) {
    return f.Error("config_groups", "must be a non-empty object");
  }
  WeightFormat w;
  w.layout = QuantLayout::kPackQuantized;
  const Fields groups = f.Sub("config_groups");
  for (const auto& [name, value] : f.At("config_groups").items()) {
    if (!value.is_object()) return groups.Error(name.c_str(), "must be an object");
    const Fields g = groups.Sub(name.c_str());
    QuantGroup qg;
    qg.name = name;
    qg.targets.match = ModulePatterns::Match::kTensors;
    SPAR_ASSIGN_OR_RETURN(qg.targets.patterns, g.StringList("targets"));
    if (qg.targets.patterns.empty()) return g.Error("targets", "must list at least one target");
    if (!g.Has("weights") || !g.At("weights").is_object()) return g.Error("weights", "must be an object");
    SPAR_ASSIGN_OR_RETURN(qg.scheme, ParseCtWeights(g.Sub("weights")));
    SPAR_RETURN_IF_ERROR(g.MustBeEmpty("input_activations", "activation quantization (W4A8, W4A4) is not supported: "
                                                            "spar runs 4-bit weights with bf16 activations"));
    SPAR_RETURN_IF_ERROR(g.MustBeEmpty("output_activations", "output quantization is not supported"));
    if (g.Has("format")) {
      SPAR_ASSIGN_OR_RETURN(std::string gf, g.String("format"));
      if (gf != "pack-quantized") return g.Error("format", absl::StrCat("\"", gf, "\" is not supported (pack-quantized)"));
    }
    w.groups.push_back(std::move(qg));
  }
  w.not_converted.match = ModulePatterns::Match::kTensors;
  SPAR_ASSIGN_OR_RETURN(w.not_converted.patterns, f.StringList("ignore"));
  if (auto st = w.not_converted.Compile(); !st.ok()) return f.Error("ignore", st.message());
  for (QuantGroup& g : w.groups) {
    if (auto st = g.targets.Compile(); !st.ok()) {
      return f.Error(absl::StrCat("config_groups.", g.name, ".targets"), st.message());
    }
  }
  return w;
}

// The NVFP4 fields, wherever they sit (hf_quant_config.json's "quantization"
// object or config.json's quantization_config).
absl::StatusOr<WeightFormat> ParseModelOptFields(const Fields& f) {
  SPAR_ASSIGN_OR_RETURN(std::string algo, f.String("quant_algo"));
  if (algo != "NVFP4") {
    return f.Error("quant_algo", absl::StrCat("\"", algo, "\" is not supported (NVFP4; block-FP8 checkpoints use "
                                              "quant_method fp8)"));
  }
  QuantScheme s;
  s.layout = QuantLayout::kNvfp4;
  s.group_size = 16;
  s.zero_points = false;
  if (f.Has("group_size")) {
    SPAR_ASSIGN_OR_RETURN(int64_t group, f.Int("group_size"));
    if (group != 16) return f.Error("group_size", absl::StrCat("is ", group, ": NVFP4 scales blocks of 16"));
  }
  // An FP8 KV cache in the checkpoint's terms is a run-time choice in spar's
  // (--kv-cache-dtype); the k/v scale tensors it implies are not read.
  SPAR_ASSIGN_OR_RETURN(std::string kv, f.StringOr("kv_cache_quant_algo", ""));
  if (!kv.empty() && kv != "FP8") return f.Error("kv_cache_quant_algo", absl::StrCat("\"", kv, "\" is not supported (null or FP8)"));
  WeightFormat w;
  w.layout = QuantLayout::kNvfp4;
  w.groups.push_back(AllLinear(s));
  w.not_converted.match = ModulePatterns::Match::kGlob;
  SPAR_ASSIGN_OR_RETURN(auto exclude, f.StringList("exclude_modules"));
  SPAR_ASSIGN_OR_RETURN(auto ignore, f.StringList("ignore"));
  w.not_converted.patterns = exclude;
  w.not_converted.patterns.insert(w.not_converted.patterns.end(), ignore.begin(), ignore.end());
  return w;
}

bool Glob(const char* p, const char* s) {
  // fnmatch without character classes: '*' any run, '?' one character.
  const char *star = nullptr, *resume = nullptr;
  while (*s) {
    if (*p == '?' || (*p == *s && *p != '*')) {
      ++p;
      ++s;
    } else if (*p == '*') {
      star = p++;
      resume = s;
    } else if (star) {
      p = star + 1;
      s = ++resume;
    } else {
      return false;
    }
  }
  while (*p == '*') ++p;
  return *p == '\0';
}

bool SameScheme(const QuantScheme& a, const QuantScheme& b) {
  return a.layout == b.layout && a.group_size == b.group_size && a.zero_points == b.zero_points &&
         a.zero_plus_one == b.zero_plus_one;
}

}  // namespace

absl::string_view QuantLayoutName(QuantLayout layout) {
  switch (layout) {
    case QuantLayout::kAwq:
      return "AWQ";
    case QuantLayout::kGptq:
      return "GPTQ";
    case QuantLayout::kPackQuantized:
      return "compressed-tensors pack-quantized";
    case QuantLayout::kNvfp4:
      return "NVFP4";
  }
  return "?";
}

bool ModulePatterns::Matches(const std::string& module) const {
  for (const std::string& p : patterns) {
    switch (match) {
      case Match::kSubstring:
        if (absl::StrContains(module, p)) return true;
        break;
      case Match::kGlob:
        if (Glob(p.c_str(), module.c_str())) return true;
        break;
      case Match::kTensors:
        // Every module spar loads as a matrix is an nn.Linear in the
        // Hugging Face model (the router and the embedding are not matrices
        // here), so the class target "Linear" matches them all.
        if (p == "Linear" || p == module) return true;
        if (absl::StartsWith(p, "re:")) {
          const size_t i = &p - patterns.data();
          std::shared_ptr<const std::regex> re =
              regexes_.size() == patterns.size() && regexes_[i] ? regexes_[i] : std::make_shared<const std::regex>(p.substr(3));
          if (std::regex_search(module, *re, std::regex_constants::match_continuous)) return true;
        }
        break;
    }
  }
  return false;
}

absl::Status ModulePatterns::Compile() {
  regexes_.assign(patterns.size(), nullptr);
  if (match != Match::kTensors) return absl::OkStatus();
  for (size_t i = 0; i < patterns.size(); ++i) {
    if (!absl::StartsWith(patterns[i], "re:")) continue;
    // libstdc++'s regex compiler and matcher recurse: bound what a config
    // may ask of them (real ignore lists hold short patterns).
    int depth = 0, max_depth = 0;
    for (char ch : patterns[i]) {
      depth += ch == '(' ? 1 : ch == ')' ? -1 : 0;
      max_depth = std::max(max_depth, depth);
    }
    if (patterns[i].size() > 512 || max_depth > 16) {
      return absl::InvalidArgumentError(absl::StrCat("entry \"", patterns[i].substr(0, 64),
                                                     "...\" is too long or nested for a module pattern"));
    }
    try {
      regexes_[i] = std::make_shared<const std::regex>(patterns[i].substr(3));
    } catch (const std::regex_error&) {
      return absl::InvalidArgumentError(absl::StrCat("entry \"", patterns[i], "\" is not a valid regular expression"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<QuantScheme>> WeightFormat::SchemeFor(const std::string& module) const {
  if (not_converted.Matches(module)) return std::optional<QuantScheme>();
  const QuantGroup* found = nullptr;
  for (const QuantGroup& g : groups) {
    if (!g.targets.Matches(module)) continue;
    if (found != nullptr && !SameScheme(found->scheme, g.scheme)) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": module \"", module, "\" is targeted by config groups \"",
                                                     found->name, "\" and \"", g.name, "\" with different schemes"));
    }
    if (found == nullptr) found = &g;
  }
  if (found == nullptr) return std::optional<QuantScheme>();
  return std::optional<QuantScheme>(found->scheme);
}

std::string WeightFormat::Describe() const {
  std::vector<std::string> schemes;
  for (const QuantGroup& g : groups) {
    const QuantScheme& s = g.scheme;
    std::string d = s.layout == QuantLayout::kNvfp4 ? "e2m1, e4m3 scale per 16, fp32 global scale"
                                                    : absl::StrCat("int4, ", s.group_size == 0 ? std::string("per-channel")
                                                                                               : absl::StrCat("group ", s.group_size),
                                                                   s.zero_points ? ", zero points" : ", symmetric");
    schemes.push_back(d);
  }
  return absl::StrCat(QuantLayoutName(layout), " (", absl::StrJoin(schemes, "; "), "), ", not_converted.patterns.size(),
                      " unconverted module pattern(s)");
}

bool IsFourBitQuantMethod(absl::string_view m) {
  return m == "awq" || m == "gptq" || m == "compressed-tensors" || m == "modelopt";
}

absl::StatusOr<WeightFormat> ParseWeightFormat(absl::string_view text) {
  const json q = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (q.is_discarded() || !q.is_object()) {
    return absl::InvalidArgumentError("config.json: field \"quantization_config\" must be an object");
  }
  const Fields f(q, kConfigFile, "quantization_config");
  SPAR_ASSIGN_OR_RETURN(std::string method, f.String("quant_method"));
  absl::StatusOr<WeightFormat> w;
  if (method == "awq") {
    w = ParseAwq(f);
  } else if (method == "gptq") {
    w = ParseGptq(f);
  } else if (method == "compressed-tensors") {
    w = ParseCompressedTensors(f);
  } else if (method == "modelopt") {
    // Newer ModelOpt exports copy hf_quant_config.json's "quantization"
    // object into config.json; some keep it nested.
    w = f.Has("quantization") && f.At("quantization").is_object() ? ParseModelOptFields(f.Sub("quantization"))
                                                                  : ParseModelOptFields(f);
  } else {
    return f.Error("quant_method", absl::StrCat("\"", method, "\" is not a 4-bit format (awq, gptq, compressed-tensors, modelopt)"));
  }
  if (!w.ok()) return w.status();
  w->source = "config.json quantization_config";
  w->config_json = q.dump();
  return w;
}

absl::StatusOr<WeightFormat> ParseHfQuantConfig(absl::string_view text) {
  const json root = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError("hf_quant_config.json: not a JSON object");
  }
  const Fields top(root, kHfQuantFile, "");
  if (!top.Has("quantization") || !root.at("quantization").is_object()) {
    return top.Error("quantization", "must be an object");
  }
  SPAR_ASSIGN_OR_RETURN(WeightFormat w, ParseModelOptFields(top.Sub("quantization")));
  w.source = kHfQuantFile;
  w.hf_quant_config_json = root.dump();
  // What config.json would hold for the same checkpoint (newer exports).
  json q = root.at("quantization");
  q["quant_method"] = "modelopt";
  w.config_json = q.dump();
  return w;
}

}  // namespace spar
