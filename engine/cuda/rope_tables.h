// RoPE tables on the device: the inverse frequencies MLA's kernels rotate
// with, and host-built cos/sin rows per position for the indexer's kernels,
// covering the served context.
#ifndef SPAR_ENGINE_CUDA_ROPE_TABLES_H_
#define SPAR_ENGINE_CUDA_ROPE_TABLES_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/cuda/device_buffer.h"
#include "kernels/cuda/indexer/indexer.h"
#include "kernels/ref/rope_ref.h"

namespace spar {

class RopeTables {
 public:
  // Positions [0, rows) where rows is `cap` if > 0, else `max_positions` if
  // > 0, else a default of 32768.
  absl::Status Set(const ref::RopeParams& params, int64_t max_positions, int64_t cap);

  int64_t rows() const { return rows_; }
  const float* inv_freq() const { return inv_freq_.as<float>(); }
  float attention_factor() const { return static_cast<float>(params_.attention_factor); }
  IndexerRope ForIndexer(ref::RopePairs pairs) const;

 private:
  static constexpr int64_t kDefaultRows = 32768;
  ref::RopeParams params_;
  DeviceBuffer inv_freq_, cos_, sin_;
  int64_t rows_ = 0;
};

}  // namespace spar

#endif  // SPAR_ENGINE_CUDA_ROPE_TABLES_H_
