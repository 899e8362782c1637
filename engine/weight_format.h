// The 4-bit weight formats spar reads, as a descriptor parsed from the
// checkpoint's quantization config: which layout the packed tensors have
// (AWQ, GPTQ, compressed-tensors pack-quantized, ModelOpt NVFP4), the group
// size and zero-point convention, and which modules the config keeps
// unconverted. The layouts themselves are written out in
// docs/weight_formats.md; kernels/ref/int4_ref.h unpacks them.
//
// What is accepted is exactly what is documented there; any other value of
// a field that changes the meaning of the tensors (bits, version, act-order,
// activation quantization, ...) is refused with an error naming the field.
// Fields that only describe how the checkpoint was made (damp_percent,
// observer, producer version, ...) are ignored.
#ifndef SPAR_ENGINE_WEIGHT_FORMAT_H_
#define SPAR_ENGINE_WEIGHT_FORMAT_H_

#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace spar {

enum class QuantLayout {
  kAwq,            // quant_method "awq", version "gemm"
  kGptq,           // quant_method "gptq"
  kPackQuantized,  // quant_method "compressed-tensors", format "pack-quantized"
  kNvfp4,          // ModelOpt quant_algo "NVFP4"
};

absl::string_view QuantLayoutName(QuantLayout layout);

// How one module's weight is stored.
struct QuantScheme {
  QuantLayout layout = QuantLayout::kAwq;
  // K values sharing one scale (and zero point); 0: one group per output row
  // (GPTQ group_size -1, compressed-tensors strategy "channel").
  int group_size = 128;
  bool zero_points = true;    // asymmetric: zero points are stored
  bool zero_plus_one = false;  // GPTQ v1: the stored zero is z - 1
  // The group size for a matrix of `cols` input features.
  int64_t GroupFor(int64_t cols) const { return group_size == 0 ? cols : group_size; }
};

// A list of module-name patterns, matched the way the tool that wrote the
// config matches them.
struct ModulePatterns {
  enum class Match {
    kSubstring,  // AWQ / GPTQ modules_to_not_convert: the entry occurs in the name
    kGlob,       // ModelOpt exclude_modules: fnmatch over the whole name (* and ?)
    kTensors,    // compressed-tensors: "re:<regex>" (re.match, anchored at the start),
                 // "Linear" (every linear module) or an exact module name
  };
  ModulePatterns() = default;
  ModulePatterns(Match m, std::vector<std::string> p) : match(m), patterns(std::move(p)) {}

  Match match = Match::kSubstring;
  std::vector<std::string> patterns;
  bool Matches(const std::string& module) const;
  // Compiles the "re:" entries once (the parsers call it; Matches compiles
  // on the fly for patterns built by hand). Errors name the bad entry.
  absl::Status Compile();

 private:
  std::vector<std::shared_ptr<const std::regex>> regexes_;  // parallel to patterns, null for non-regex
};

// One compressed-tensors config group (other formats have exactly one).
struct QuantGroup {
  std::string name;  // "group_0"; empty outside compressed-tensors
  ModulePatterns targets;  // modules this group converts
  QuantScheme scheme;
};

struct WeightFormat {
  QuantLayout layout = QuantLayout::kAwq;
  // Tried in order. AWQ / GPTQ: one, targeting the decoder layers' linears
  // (model.layers.*); NVFP4: one, targeting every linear.
  std::vector<QuantGroup> groups;
  ModulePatterns not_converted;    // ignore / modules_to_not_convert / exclude_modules
  // Where the config was read ("config.json quantization_config",
  // "hf_quant_config.json"), for messages.
  std::string source;
  // The quantization config object as read (make-tiny writes it back).
  std::string config_json;
  // ModelOpt only: the hf_quant_config.json text when that file was the
  // source (make-tiny writes it next to config.json).
  std::string hf_quant_config_json;

  // The scheme of a linear module ("model.layers.3.mlp.experts.7.up_proj"),
  // or nullopt when the config keeps it unconverted. Errors when two
  // compressed-tensors groups with different schemes both claim it.
  absl::StatusOr<std::optional<QuantScheme>> SchemeFor(const std::string& module) const;
  // One line for logs and `spar plan`: "AWQ int4, group 128, zero points".
  std::string Describe() const;
};

// Parses config.json's "quantization_config" object (as JSON text) when its
// quant_method is awq, gptq, compressed-tensors or modelopt. Errors name the
// field ("quantization_config.version ...").
absl::StatusOr<WeightFormat> ParseWeightFormat(absl::string_view quantization_config_json);

// Parses a ModelOpt hf_quant_config.json.
absl::StatusOr<WeightFormat> ParseHfQuantConfig(absl::string_view hf_quant_config_json);

// True for the quant_method values ParseWeightFormat handles.
bool IsFourBitQuantMethod(absl::string_view quant_method);

}  // namespace spar

#endif  // SPAR_ENGINE_WEIGHT_FORMAT_H_
