#include "services/common/layer_split.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace spar {

absl::StatusOr<LayerRange> ParseLayerRange(const std::string& text) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  LayerRange r;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &r.first) || !absl::SimpleAtoi(parts[1], &r.last) ||
      r.first < 0 || r.last <= r.first) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer range \"", text, "\" is not FIRST:LAST with 0 <= FIRST < LAST (LAST exclusive)"));
  }
  return r;
}

absl::StatusOr<std::vector<LayerRange>> ParseStageLayers(const std::string& text, int num_layers) {
  std::vector<LayerRange> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    auto r = ParseLayerRange(std::string(part));
    if (!r.ok()) return r.status();
    out.push_back(*r);
  }
  if (auto s = CheckStageLayers(out, num_layers); !s.ok()) return s;
  return out;
}

absl::Status CheckStageLayers(const std::vector<LayerRange>& ranges, int num_layers) {
  int expect = 0;
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (ranges[i].first != expect || ranges[i].last <= ranges[i].first) {
      return absl::InvalidArgumentError(absl::StrCat("stage layers ", FormatStageLayers(ranges),
                                                     " are not contiguous from layer 0: stage ", i, " is ",
                                                     ranges[i].first, ":", ranges[i].last, ", expected to start at ",
                                                     expect));
    }
    expect = ranges[i].last;
  }
  if (expect != num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("stage layers ", FormatStageLayers(ranges), " end at layer ", expect, "; the model has ", num_layers));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<LayerRange>> SplitLayers(const ModelConfig& config, int stages) {
  const int n = config.num_hidden_layers;
  if (stages < 1 || stages > n) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot split ", n, " layers into ", stages, " stages (1 to ", n, " stages)"));
  }
  auto may_start = [&](int layer) {
    return layer == 0 || layer >= static_cast<int>(config.indexer_types.size()) ||
           config.indexer_types[layer] == IndexerType::kFull;
  };
  std::vector<int> bounds = {0};
  for (int s = 1; s < stages; ++s) {
    int b = static_cast<int>(static_cast<int64_t>(n) * s / stages);
    while (b > bounds.back() + 1 && !may_start(b)) --b;
    if (b <= bounds.back() || !may_start(b)) {
      return absl::InvalidArgumentError(absl::StrCat("cannot split ", n, " layers into ", stages,
                                                     " stages: too few layers with their own indexer to start a stage"));
    }
    bounds.push_back(b);
  }
  bounds.push_back(n);
  std::vector<LayerRange> out;
  for (int s = 0; s < stages; ++s) out.push_back({bounds[s], bounds[s + 1]});
  return out;
}

std::string FormatStageLayers(const std::vector<LayerRange>& ranges) {
  return absl::StrJoin(ranges, ",", [](std::string* out, const LayerRange& r) {
    absl::StrAppend(out, r.first, ":", r.last);
  });
}

}  // namespace spar
