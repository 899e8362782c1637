#include "engine/cuda/rope_tables.h"

#include <vector>

#include "base/status_macros.h"

namespace spar {

absl::Status RopeTables::Set(const ref::RopeParams& params, int64_t max_positions, int64_t cap) {
  params_ = params;
  const std::vector<float> inv = ref::RopeInvFreq(params);
  SPAR_RETURN_IF_ERROR(inv_freq_.Upload(inv.data(), inv.size() * 4));
  rows_ = cap > 0 ? cap : (max_positions > 0 ? max_positions : kDefaultRows);
  std::vector<float> cs(static_cast<size_t>(rows_) * inv.size()), sn(cs.size());
  for (int64_t p = 0; p < rows_; ++p) {
    ref::RopeCosSin(inv, p, static_cast<float>(params.attention_factor), cs.data() + p * inv.size(),
                    sn.data() + p * inv.size());
  }
  SPAR_RETURN_IF_ERROR(cos_.Upload(cs.data(), cs.size() * 4));
  SPAR_RETURN_IF_ERROR(sin_.Upload(sn.data(), sn.size() * 4));
  return absl::OkStatus();
}

IndexerRope RopeTables::ForIndexer(ref::RopePairs pairs) const {
  IndexerRope r;
  r.cos = cos_.as<float>();
  r.sin = sin_.as<float>();
  r.rows = rows_;
  r.pairs = pairs;
  return r;
}

}  // namespace spar
