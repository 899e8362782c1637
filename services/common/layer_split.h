// Pipeline stage layer ranges: parsing "A:B" / "0:20,20:40,40:78" flags and
// the default even split.
#ifndef SPAR_SERVICES_COMMON_LAYER_SPLIT_H_
#define SPAR_SERVICES_COMMON_LAYER_SPLIT_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model_config.h"

namespace spar {

// Decoder layers [first, last).
struct LayerRange {
  int first = 0;
  int last = 0;
  bool operator==(const LayerRange& o) const { return first == o.first && last == o.last; }
};

// "A:B" with 0 <= A < B.
absl::StatusOr<LayerRange> ParseLayerRange(const std::string& text);
// "A:B,B:C,..." contiguous from 0 to `num_layers`.
absl::StatusOr<std::vector<LayerRange>> ParseStageLayers(const std::string& text, int num_layers);
// Non-empty ranges, contiguous from layer 0 to `num_layers`.
absl::Status CheckStageLayers(const std::vector<LayerRange>& ranges, int num_layers);

// Splits the model's layers into `stages` contiguous ranges as evenly as
// possible. A stage may not start on a layer that shares the previous
// layer's indexer top-k (GLM-5.2 style), so such boundaries move down.
absl::StatusOr<std::vector<LayerRange>> SplitLayers(const ModelConfig& config, int stages);

std::string FormatStageLayers(const std::vector<LayerRange>& ranges);

}  // namespace spar

#endif  // SPAR_SERVICES_COMMON_LAYER_SPLIT_H_
